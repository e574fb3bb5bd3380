"""The packed forward (each distinct token once) against the padded `transformers` forward."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from reinforge.config import LoraConfig
from reinforge.learner.batch import TrainingBatch
from reinforge.learner import logprobs as logprobs_module
from reinforge.learner.logprobs import token_logprobs
from reinforge.learner.packed_forward import packed_token_logprobs, plan_packing, supports
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.models.lora import apply_lora, peft_available
from packed_batches import PAD, grpo_rows, right_padded, small

def test_plan_packing_by_hand():
    # row 1 shares "5 6" with row 0; row 2 repeats row 0 then goes on; row 3 has PAD as a real token
    # where row 1 has a pad: a real token is never taken for a pad
    ids, mask = right_padded([[5, 6, 7, 8], [5, 6, 9], [5, 6, 7, 8, 4], [5, 6, 9, PAD]])
    packing = plan_packing(ids, mask)
    assert packing.num_tokens == 4 + 1 + 1 + 1
    assert packing.token_ids.tolist() == [5, 6, 7, 8, 9, 4, PAD]
    assert packing.positions.tolist() == [0, 1, 2, 3, 2, 4, 3]
    pad = packing.num_tokens
    assert packing.source.tolist() == [
        [0, 1, 2, 3, pad],
        [0, 1, 4, pad, pad],
        [0, 1, 2, 3, 5],
        [0, 1, 4, 6, pad],
    ]
    # rows 1-3 diverge from row 0 at column 2 or later: their queries start there, in calls of their
    # own; row 1 (3 tokens) apart from rows 3 and 2 (4, 5): 1 x 1 x 3 + 2 x 3 x 5 = 33 query-key
    # pairs instead of 3 x 3 x 5 = 45, at least a quarter saved
    calls = [(call.source.shape, call.offset) for call in packing.calls]
    assert calls == [((1, 4), 0), ((1, 3), 2), ((2, 5), 2)]
    assert packing.calls[1].mask.tolist() == [[True, True, True]]
    assert packing.calls[2].mask.tolist() == [[j <= i for j in range(5)] for i in range(2, 5)]
    assert packing.calls[2].source.tolist() == [[0, 1, 4, 6, 0], [0, 1, 2, 3, 5]]  # rows 3, 2: by length
    # outputs in call order: row 0's 4 tokens, row 1's query, then 3 queries each for rows 3 and 2
    assert packing.outputs.tolist() == [0, 1, 2, 3, 4, 5 + 1 * 3 + 2, 5 + 0 * 3 + 1]
    # the same attention as the C kernel reads it: each row's slots, the first slot it computes, its length
    assert packing.rows.source.tolist() == [[0, 1, 2, 3, 0], [0, 1, 4, 0, 0], [0, 1, 2, 3, 5], [0, 1, 4, 6, 0]]
    assert packing.rows.first.tolist() == [0, 2, 4, 3]
    assert packing.rows.length.tolist() == [4, 3, 5, 4]


def test_a_repeated_row_computes_nothing():
    ids, mask = right_padded([[3, 4, 5], [3, 4, 5], [3, 9]])
    packing = plan_packing(ids, mask)
    assert packing.num_tokens == 4
    assert [call.source.shape[0] for call in packing.calls] == [1, 1]  # row 1 attends nothing
    assert packing.source[1].tolist() == packing.source[0].tolist()


def test_small_pairwise_chunks_give_the_same_plan():
    from reinforge.engines.shared_prefixes import first_rows_with_prefix

    ids, mask = right_padded(grpo_rows())
    whole = first_rows_with_prefix(ids, mask.bool())
    assert torch.equal(whole, first_rows_with_prefix(ids, mask.bool(), chunk_elements=1))


MODELS = {
    "llama, grouped kv heads": lambda: small(LlamaForCausalLM, LlamaConfig),
    "llama, tied embeddings, one kv head": lambda: small(LlamaForCausalLM, LlamaConfig, num_key_value_heads=1, tie_word_embeddings=True),
    "qwen2 (q, k, v biases)": lambda: small(Qwen2ForCausalLM, Qwen2Config),
}


def assert_same_as_padded(model, ids, mask, temperature=1.0, gradients=True):
    """Log-probs and entropies where the next token is real, and every trained weight's gradient."""
    real = mask[:, 1:].bool()
    weights = torch.randn(real.shape, generator=torch.Generator().manual_seed(1)) * real

    def run(packed: bool):
        model.zero_grad()
        if packed:
            lp, ent = packed_token_logprobs(model, ids, mask, plan_packing(ids, mask), temperature, entropy_grad=True)
        else:
            lp, ent = token_logprobs(model, ids, mask, temperature, entropy_grad=True)
        if gradients:
            ((lp + 0.1 * ent) * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return lp.detach(), ent.detach(), grads

    lp_a, ent_a, grads_a = run(False)
    lp_b, ent_b, grads_b = run(True)
    assert torch.allclose(lp_a[real], lp_b[real], atol=1e-5, rtol=0)
    assert torch.allclose(ent_a[real], ent_b[real], atol=1e-5, rtol=0)
    assert (lp_b[~real] == 0).all() and (ent_b[~real] == 0).all()
    assert grads_a.keys() == grads_b.keys() and (grads_a or not gradients)
    for name, grad in grads_a.items():
        scale = grad.abs().max().clamp(min=1e-8)
        assert ((grad - grads_b[name]).abs().max() / scale) < 1e-4, name


@pytest.mark.parametrize("prompt_tokens, late_queries", [((2, 4), False), ((40, 50), True)])
@pytest.mark.parametrize("name", list(MODELS))
def test_same_logprobs_and_gradients_as_the_padded_forward(name, prompt_tokens, late_queries):
    model = MODELS[name]()
    assert supports(model)
    ids, mask = right_padded(grpo_rows(prompt_tokens=prompt_tokens))
    packing = plan_packing(ids, mask)
    assert packing.num_tokens < 0.9 * mask.sum() and mask.sum() < ids.numel()  # rows share tokens, and there are pads
    # long prompts: the rows that share one attend from their own tokens on; short ones: rows of
    # varied length attend in calls as wide as their longest row
    assert any(call.offset > 0 for call in packing.calls) == late_queries
    assert len(packing.calls) > 1
    assert_same_as_padded(model, ids, mask, temperature=0.7)


@pytest.mark.skipif(not peft_available(), reason="needs peft (reinforge[lora])")
def test_lora_adapters_apply_and_switch_off():
    model = apply_lora(small(LlamaForCausalLM, LlamaConfig), LoraConfig(r=4))
    with torch.no_grad():  # fresh adapters are zero (B = 0): give them a value, so that they matter
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    assert supports(model)
    ids, mask = right_padded(grpo_rows())
    assert_same_as_padded(model, ids, mask)
    with model.disable_adapter():
        assert_same_as_padded(model, ids, mask, gradients=False)  # the adapters are all that is trained
        base, _ = packed_token_logprobs(model, ids, mask, plan_packing(ids, mask))
    adapted, _ = packed_token_logprobs(model, ids, mask, plan_packing(ids, mask))
    assert (base - adapted).abs().max() > 1e-3


def test_token_logprobs_packs_when_it_saves_or_when_the_c_kernels_run(monkeypatch):
    model = small(LlamaForCausalLM, LlamaConfig)
    distinct = torch.arange(1, 41).view(4, 10)  # nothing shared, no pads: packing saves no position
    mask = torch.ones_like(distinct)
    padded = token_logprobs(model, distinct, mask)[0]
    packed_calls = []
    real_packed = logprobs_module.packed_token_logprobs
    monkeypatch.setattr(logprobs_module, "packed_token_logprobs", lambda *a, **k: packed_calls.append(1) or real_packed(*a, **k))
    # torch's ops: the padded forward runs, bit for bit
    assert torch.equal(token_logprobs(model, distinct, mask, pack=True, packed_kernels="torch")[0], padded)
    assert packed_calls == []
    # the C kernels pack all the same (faster than the padded forward even then): equal to rounding
    with_c = token_logprobs(model, distinct, mask, pack=True, packed_kernels="native")[0]
    assert packed_calls == [1]
    assert torch.allclose(with_c, padded, atol=1e-5, rtol=0)
    ids, mask = right_padded(grpo_rows())
    packed = token_logprobs(model, ids, mask, pack=True, packed_kernels="torch")[0]
    assert packed_calls == [1, 1]
    assert (packed[~mask[:, 1:].bool()] == 0).all()  # the packed forward ran: pads come back 0


def test_logprobs_without_the_entropy():
    """What a reference asks for: the same log-probs, and no entropy computed."""
    model = small(LlamaForCausalLM, LlamaConfig)
    ids, mask = right_padded(grpo_rows())
    for pack in (False, True):
        chosen, entropy = token_logprobs(model, ids, mask, pack=pack, entropy=False)
        assert entropy is None
        assert torch.equal(chosen, token_logprobs(model, ids, mask, pack=pack)[0])


def test_an_update_with_packing_matches_the_padded_one():
    rows = grpo_rows()
    ids, mask = right_padded(rows)
    real = mask[:, 1:].bool()
    loss_mask = real.clone()
    for i, row in enumerate(rows):  # the first 5 tokens are the prompt at least
        loss_mask[i, :4] = False
    start = small(LlamaForCausalLM, LlamaConfig)
    with torch.no_grad():
        old, _ = token_logprobs(start, ids, mask)
    batch = TrainingBatch(ids, mask, loss_mask, old * real, torch.randn(len(rows)))

    def loss_fn(logprobs, entropy, micro, norm):
        ratio = (logprobs - micro.old_logprobs).exp()
        loss = -(ratio * micro.advantages[:, None] * micro.loss_mask).sum() / norm.num_tokens
        return loss, {}

    learners = [PolicyLearner(copy.deepcopy(start), lr=1e-2, pack_sequences=pack) for pack in (False, True)]
    assert [learner.pack for learner in learners] == [False, True]
    for learner in learners:
        for _ in range(3):
            learner.train_step(batch, loss_fn)
    for (name, a), b in zip(learners[0].model.named_parameters(), learners[1].model.parameters()):
        assert torch.allclose(a, b, atol=1e-5), name
    assert any((a - b).abs().max() > 0 for a, b in zip(start.parameters(), learners[1].model.parameters()))


def test_the_config_switch_reaches_the_learner_and_the_reference():
    from types import SimpleNamespace

    from reinforge.config import load_config
    from reinforge.run.pipeline import build_learners, build_reference

    env = SimpleNamespace(max_turns=1)
    for overrides, packed in (([], True), (["algo.pack_sequences=false"], False), (["algo.compile_forward=true"], False)):
        cfg = load_config("default", ["algo.kl_coef=0.05", *overrides])
        model = small(LlamaForCausalLM, LlamaConfig)
        model.compile = lambda **_: None  # compile_forward compiles the padded forward: the compile itself is not under test
        learner = build_learners(cfg, {"policy": model}, env)[0]["policy"]
        assert learner.pack is packed and build_reference(cfg, model).pack is packed, overrides


@pytest.mark.parametrize("pack", [False, True])
def test_only_the_needed_positions_reach_the_output_layer(monkeypatch, pack):
    """`needed` (a batch's loss_mask): the same log-probs and entropies there, 0 elsewhere, and the
    output layer sees only the hidden states some needed position reads (here: not the prompt's)."""
    from reinforge.learner import chunked_logprobs, packed_forward

    model = small(LlamaForCausalLM, LlamaConfig)
    ids, mask = right_padded(grpo_rows(prompt_tokens=(6, 9)))
    real = mask[:, 1:].bool()
    needed = real.clone()
    needed[:, :8] = False  # the prompts' own tokens (and a completion's first tokens on short prompts)
    rows_seen = []
    chunked = chunked_logprobs.chunked_token_logprobs
    spy = lambda hidden, *a, **k: rows_seen.append(hidden.shape[0]) or chunked(hidden, *a, **k)  # noqa: E731
    monkeypatch.setattr(logprobs_module, "chunked_token_logprobs", spy)
    monkeypatch.setattr(packed_forward, "chunked_token_logprobs", spy)
    everything = token_logprobs(model, ids, mask, pack=pack)
    some = token_logprobs(model, ids, mask, pack=pack, needed=needed)
    for whole, part in zip(everything, some):
        assert torch.allclose(part[needed], whole[needed], atol=1e-6, rtol=0)
        assert (part[~needed] == 0).all() and (whole[real & ~needed] != 0).any()
    assert rows_seen[1] < rows_seen[0]
    if not pack:
        assert rows_seen == [int(real.sum()), int(needed.sum())]
    # a micro-batch that no loss reads (a sharded group's padding pass can be one): zeros, and a backward
    nothing, _ = token_logprobs(model, ids, mask, pack=pack, needed=torch.zeros_like(needed))
    assert (nothing == 0).all()
    nothing.sum().backward()
