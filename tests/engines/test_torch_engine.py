"""TorchEngine: the fused Llama decoder against `transformers`, stopping, row dropping, fallback."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from conftest import sharpen_
from reinforge.engines import llama_decoder, torch_engine
from reinforge.engines.base import SamplingParams
from reinforge.engines.llama_decoder import FusedLlamaDecoder
from reinforge.engines.llama_decoder import _plan_prompt
from reinforge.engines.torch_engine import MIN_SHARED_PROMPT, HFDecoder, TorchEngine, consecutive_group_size
from float_bounds import forward_bound, logit_bound

GREEDY = SamplingParams(max_new_tokens=6, temperature=0.0)


def left_pad(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    return ids, mask


@torch.no_grad()
def hf_last_logits(model, sequences: list[list[int]]) -> torch.Tensor:
    """The reference: `transformers` forward on each sequence alone, no padding at all."""
    return torch.stack([model(torch.tensor([s])).logits[0, -1].float() for s in sequences])


@torch.no_grad()
def assert_fused_matches_transformers(model, prompts: list[list[int]], pad: int, forced: list[list[int]], decoder_class=FusedLlamaDecoder) -> None:
    decoder = decoder_class(model)
    ids, mask = left_pad(prompts, pad)
    logits, state = decoder.prefill(ids, mask, max_new_tokens=len(forced[0]) + 1)
    reference = hf_last_logits(model, prompts)
    assert reference.abs().max() > 1.0  # the comparison is not between near-zero logits
    # Fused kernels vs transformers add in another order: float32 noise (tests/float_bounds.py).
    assert (logits - reference).abs().max().item() < forward_bound(model, reference.abs().max().item())
    sequences = [list(p) for p in prompts]
    for step in range(len(forced[0])):
        tokens = torch.tensor([f[step] for f in forced])
        for seq, token in zip(sequences, tokens.tolist()):
            seq.append(token)
        logits = decoder.step(tokens, state)
        reference = hf_last_logits(model, sequences)
        assert (logits - reference).abs().max().item() < forward_bound(model, reference.abs().max().item()), f"step {step}"


def test_fused_decoder_matches_transformers_on_left_padded_prompts(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    assert len({len(p) for p in arithmetic_prompts}) > 2
    forced = [[5 + row, 20 + row, 7] for row in range(len(arithmetic_prompts))]
    assert_fused_matches_transformers(sharp_nano_model, arithmetic_prompts, tokenizer.pad_token_id, forced)


def small_config(cls, **overrides):
    base = dict(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64,
    )
    return cls(**{**base, **overrides})


@pytest.mark.parametrize(
    "name, model",
    [
        ("llama grouped kv heads", lambda: LlamaForCausalLM(small_config(LlamaConfig))),
        ("llama one kv head", lambda: LlamaForCausalLM(small_config(LlamaConfig, num_key_value_heads=1))),
        # attention_bias puts biases on q, k, v *and* o; mlp_bias on gate, up, down
        ("llama with biases", lambda: LlamaForCausalLM(small_config(LlamaConfig, attention_bias=True, mlp_bias=True))),
        ("qwen2 (q, k, v biases)", lambda: Qwen2ForCausalLM(small_config(Qwen2Config))),
    ],
)
def test_fused_decoder_matches_transformers_on_other_configs(name, model) -> None:
    torch.manual_seed(0)
    model = sharpen_(model()).eval()
    assert llama_decoder.supports(model)
    prompts = [[3, 4, 5, 6, 7, 8], [9, 10], [11, 12, 13, 14]]
    forced = [[20, 21], [22, 23], [24, 25]]
    assert_fused_matches_transformers(model, prompts, pad=0, forced=forced)


@torch.no_grad()
def test_decoder_state_keep_drops_rows_without_changing_the_others(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    decoder = FusedLlamaDecoder(sharp_nano_model)
    ids, mask = left_pad(arithmetic_prompts, tokenizer.pad_token_id)
    _, state = decoder.prefill(ids, mask, max_new_tokens=2)
    keep = [0, 2, 4]
    state.keep(torch.tensor(keep))
    tokens = torch.tensor([30, 31, 32])
    logits = decoder.step(tokens, state)
    expected = hf_last_logits(sharp_nano_model, [arithmetic_prompts[r] + [t] for r, t in zip(keep, tokens.tolist())])
    assert logits.shape[0] == 3
    assert (logits - expected).abs().max().item() < forward_bound(sharp_nano_model, expected.abs().max().item())


@torch.no_grad()
def test_tokens_that_rows_share_are_prefilled_once(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    a, b, c = (p * 4 for p in arithmetic_prompts[:3])  # long enough that skipping tokens pays (MIN_PACKED_TOKENS)
    # a group that repeats one prompt, rows that share their first turn and go on differently
    # (multi-turn), one that stops inside another's prompt, and one alone
    prompts = [a, a, a, a + b, a + c, a + b + c, (a + b)[: len(a) + 2], c]
    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    valid = mask.bool()
    plan = _plan_prompt(ids, valid, mask[:, None, None].bool())
    distinct = len({tuple(p[: t + 1]) for p in prompts for t in range(len(p))})  # the prefixes' trie
    assert len(plan.rows) == distinct < int(mask.sum())
    decoder = FusedLlamaDecoder(sharp_nano_model)
    logits, state = decoder.prefill(ids, mask, max_new_tokens=2)
    reference = hf_last_logits(sharp_nano_model, prompts)
    bound = forward_bound(sharp_nano_model, reference.abs().max().item())
    assert (logits - reference).abs().max().item() < bound
    tokens = torch.arange(30, 30 + len(prompts))
    step = decoder.step(tokens, state)
    reference = hf_last_logits(sharp_nano_model, [p + [t] for p, t in zip(prompts, tokens.tolist())])
    assert (step - reference).abs().max().item() < bound  # the copied keys and values are there


def test_consecutive_group_size() -> None:
    a, b, c = [1, 2], [3, 4], [5, 6]
    assert consecutive_group_size(torch.tensor([a, a, a, b, b, b])) == 3
    assert consecutive_group_size(torch.tensor([a, a, b, b, c, c])) == 2
    assert consecutive_group_size(torch.tensor([a, a, a, a])) == 4
    assert consecutive_group_size(torch.tensor([a, b, c])) == 1
    assert consecutive_group_size(torch.tensor([a, a, b, b, b])) == 1  # unequal groups
    assert consecutive_group_size(torch.tensor([a, a, b, a])) == 1
    assert consecutive_group_size(torch.tensor([a, b, a, b])) == 1  # not together


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@torch.no_grad()
def test_a_shared_prompt_cached_once_per_group_decodes_the_same(kv_heads) -> None:
    torch.manual_seed(0)
    model = sharpen_(LlamaForCausalLM(small_config(LlamaConfig, num_key_value_heads=kv_heads, max_position_embeddings=128))).eval()
    decoder = FusedLlamaDecoder(model)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, 64, (n,), generator=g).tolist() for n in (MIN_SHARED_PROMPT + 9, MIN_SHARED_PROMPT, MIN_SHARED_PROMPT + 3)]
    group_size = 3
    ids, mask = left_pad([p for p in prompts for _ in range(group_size)], pad=0)
    shared_logits, shared = decoder.prefill_shared(ids[::group_size], mask[::group_size], group_size, 6)
    assert shared.shared is not None and shared.shared.keys[0].shape[0] == len(prompts)
    logits, state = decoder.prefill(ids, mask, 6)
    bound = forward_bound(model, logits.abs().max().item())
    assert (shared_logits - logits).abs().max().item() < bound
    for step in range(5):
        if step == 3:  # rows drop: the kept rows get their own copy of the prompt back
            keep = torch.tensor([0, 4, 5, 7])
            shared.keep(keep)
            state.keep(keep)
            assert shared.shared is None
        tokens = torch.randint(1, 64, (len(shared.next_position),), generator=g)
        shared_logits, logits = decoder.step(tokens, shared), decoder.step(tokens, state)
        assert (shared_logits - logits).abs().max().item() < bound, f"step {step}"


def test_the_engine_samples_the_same_with_a_shared_prompt(sharp_nano_model, arithmetic_prompts, tokenizer, monkeypatch) -> None:
    monkeypatch.setattr(torch_engine, "MIN_SHARED_PROMPT_NATIVE", MIN_SHARED_PROMPT)  # the C decode attention shares too
    long_prompts = [(p * 8)[: MIN_SHARED_PROMPT + 5 + i] for i, p in enumerate(arithmetic_prompts[:3])]
    prompts = [p for p in long_prompts for _ in range(4)]  # as rollout_groups sends them: a group at a time
    fused = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    calls = []
    decoder = fused._get_decoder()
    prefill_shared = decoder.prefill_shared
    decoder.prefill_shared = lambda *a: calls.append(a[2]) or prefill_shared(*a)
    fallback = TorchEngine(sharp_nano_model, tokenizer.pad_token_id, fused=False)
    free = fused.generate(prompts, SamplingParams(max_new_tokens=8, temperature=1.0), seed=3)
    stop = free[0].token_ids[3]  # some rows stop early: rows are dropped mid-rollout
    params = SamplingParams(max_new_tokens=8, temperature=1.0, stop_token_ids=(stop,))
    a, b = fused.generate(prompts, params, seed=3), fallback.generate(prompts, params, seed=3)
    assert calls == [4, 4]
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert any(g.finish_reason == "stop" for g in a) and any(g.finish_reason == "length" for g in a)
    bound = logit_bound(sharp_nano_model, [p + g.token_ids for p, g in zip(prompts, a)])
    for ga, gb in zip(a, b):
        assert max(abs(x - y) for x, y in zip(ga.logprobs, gb.logprobs)) < bound


def test_fused_and_hf_paths_sample_the_same_tokens(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    fused = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    fallback = TorchEngine(sharp_nano_model, tokenizer.pad_token_id, fused=False)
    assert isinstance(fused._get_decoder(), FusedLlamaDecoder)
    assert isinstance(fallback._get_decoder(), HFDecoder)
    params = SamplingParams(max_new_tokens=8, temperature=1.0, top_k=20)
    prompts = arithmetic_prompts * 2
    a = fused.generate(prompts, params, seed=7)
    b = fallback.generate(prompts, params, seed=7)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    for ga, gb in zip(a, b):
        assert max(abs(x - y) for x, y in zip(ga.logprobs, gb.logprobs)) < logit_bound(sharp_nano_model, [p + g.token_ids for p, g in zip(prompts, a)])
    # and the seed matters: another seed gives other tokens
    c = fused.generate(prompts, params, seed=8)
    assert [g.token_ids for g in a] != [g.token_ids for g in c]
    # same seed, same engine: reproducible
    assert [g.token_ids for g in fused.generate(prompts, params, seed=7)] == [g.token_ids for g in a]


def test_max_new_tokens_ends_with_length(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    engine.sync_weights(3)
    out = engine.generate(arithmetic_prompts, SamplingParams(max_new_tokens=5, temperature=1.0), seed=0)
    assert len(out) == len(arithmetic_prompts)
    for g in out:
        assert g.finish_reason == "length"
        assert len(g.token_ids) == len(g.logprobs) == 5
        assert all(lp <= 0.0 for lp in g.logprobs)
        assert g.policy_version == 3


def test_stop_token_ends_the_row_and_is_kept(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    free = engine.generate(arithmetic_prompts, GREEDY)
    first = free[0].token_ids
    stop_token = first[2]
    assert stop_token not in first[:2]
    out = engine.generate(arithmetic_prompts, SamplingParams(max_new_tokens=6, temperature=0.0, stop_token_ids=(stop_token,)))
    assert out[0].token_ids == first[:3]
    assert out[0].token_ids[-1] == stop_token
    assert out[0].finish_reason == "stop"
    assert len(out[0].logprobs) == 3
    assert out[0].logprobs == pytest.approx(free[0].logprobs[:3], abs=logit_bound(sharp_nano_model, arithmetic_prompts))
    for g, f in zip(out, free):  # every other row: cut at its own first stop token, if any
        if stop_token in f.token_ids:
            cut = f.token_ids.index(stop_token) + 1
            assert (g.token_ids, g.finish_reason) == (f.token_ids[:cut], "stop")
        else:
            assert (g.token_ids, g.finish_reason) == (f.token_ids, "length")


def test_rows_dropped_mid_batch_match_each_prompt_generated_alone(sharp_nano_model, tokenizer, monkeypatch) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    texts = ["1+2=", "35+7=", "123+456=", "9=", "80+801=", "4+4=", "77+1=", "500+5="]
    prompts = [tokenizer(t).input_ids for t in texts]
    steps = 8
    alone = [engine.generate([p], SamplingParams(max_new_tokens=steps, temperature=0.0))[0] for p in prompts]
    # Stop on the first token of most rows (but on no token of the last row): those rows end at
    # step 0, the batch thins below half and is compacted while the last rows keep decoding.
    survivor = set(alone[-1].token_ids)
    stop = tuple(sorted({g.token_ids[0] for g in alone[:5]} - survivor))
    params = SamplingParams(max_new_tokens=steps, temperature=0.0, stop_token_ids=stop)

    def expected(g):
        for i, token in enumerate(g.token_ids):
            if token in stop:
                return g.token_ids[: i + 1], "stop"
        return g.token_ids, "length"

    wanted = [expected(g) for g in alone]
    early = sum(1 for ids, reason in wanted if reason == "stop" and len(ids) < steps - 1)
    assert early * 2 >= len(prompts) and wanted[-1][1] == "length", "test setup no longer drops rows"

    kept_sizes = []
    original_keep = llama_decoder.DecodeState.keep

    def spy(self, rows):
        kept_sizes.append(len(rows))
        return original_keep(self, rows)

    monkeypatch.setattr(llama_decoder.DecodeState, "keep", spy)
    out = engine.generate(prompts, params)
    assert kept_sizes and kept_sizes[0] < len(prompts)  # rows really were dropped
    assert [(g.token_ids, g.finish_reason) for g in out] == wanted
    for g, a in zip(out, alone):
        assert g.logprobs == pytest.approx(a.logprobs[: len(g.logprobs)], abs=logit_bound(sharp_nano_model, prompts))


def test_max_batch_size_splits_without_changing_greedy_results(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    whole = TorchEngine(sharp_nano_model, tokenizer.pad_token_id).generate(arithmetic_prompts, GREEDY)
    split = TorchEngine(sharp_nano_model, tokenizer.pad_token_id, max_batch_size=2).generate(arithmetic_prompts, GREEDY)
    assert [g.token_ids for g in split] == [g.token_ids for g in whole]


def test_sync_weights_rebuilds_the_fused_decoder(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    model = copy.deepcopy(sharp_nano_model)
    engine = TorchEngine(model, tokenizer.pad_token_id)
    before = engine.generate(arithmetic_prompts, GREEDY)
    sharpen_(model, seed=1)  # in place, like an optimizer step
    engine.sync_weights(1)
    after = engine.generate(arithmetic_prompts, GREEDY)
    fresh = TorchEngine(model, tokenizer.pad_token_id).generate(arithmetic_prompts, GREEDY)
    assert [g.token_ids for g in after] == [g.token_ids for g in fresh] != [g.token_ids for g in before]
    assert {g.policy_version for g in after} == {1}


def test_release_memory_drops_the_weight_copy_until_the_next_generate(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    """The sync schedule calls it between a rollout and the update (trainer.rollout_schedule)."""
    from reinforge.trainer.rollout_schedule import SyncSchedule

    engine = TorchEngine(copy.deepcopy(sharp_nano_model), tokenizer.pad_token_id)
    before = engine.generate(arithmetic_prompts, GREEDY)

    class OneRollout:
        def collect(self, engine, step, version):
            return engine.generate(arithmetic_prompts, GREEDY), {}

    SyncSchedule(OneRollout(), engine, max_staleness=0).collect(1)
    assert engine._decoder is None  # no copy held through the update
    again = engine.generate(arithmetic_prompts, GREEDY)  # rebuilt from the same weights
    assert engine._decoder is not None
    assert [g.token_ids for g in again] == [g.token_ids for g in before]


def test_decoder_matrices_are_copies_laid_out_in_by_out(sharp_nano_model) -> None:
    # [in, out] in memory is what makes the decode step's GEMMs cheaper (llama_decoder: matrix);
    # a copy, so that an optimizer step never changes what a policy version samples.
    decoder = FusedLlamaDecoder(sharp_nano_model)
    attn, mlp = sharp_nano_model.model.layers[0].self_attn, sharp_nano_model.model.layers[0].mlp
    layer = decoder.layers[0]
    expected = {
        "qkv": (layer.qkv_weight, torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])),
        "o": (layer.o_weight, attn.o_proj.weight),
        "gate_up": (layer.gate_up_weight, torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])),
        "down": (layer.down_weight, mlp.down_proj.weight),
        "lm_head": (decoder.lm_head, sharp_nano_model.lm_head.weight),
    }
    for name, (ours, theirs) in expected.items():
        assert torch.equal(ours, theirs), name
        assert ours.t().is_contiguous() and not ours.is_contiguous(), name
        assert ours.data_ptr() != theirs.data_ptr(), name


def test_generate_restores_training_mode(tokenizer, arithmetic_prompts) -> None:
    from reinforge.models.tiny_llama import build_tiny_llama

    model = build_tiny_llama(tokenizer, "nano").train()
    TorchEngine(model, tokenizer.pad_token_id).generate(arithmetic_prompts[:1], GREEDY)
    assert model.training


def test_empty_prompt_list_and_empty_prompt(sharp_nano_model, tokenizer) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    assert engine.generate([], GREEDY) == []
    with pytest.raises(ValueError, match="at least one token"):
        engine.generate([[1, 5], []], GREEDY)


# The fallback passes its cache under the name the installed transformers takes (`cache` from
# 5.24, when `past_key_values` became a deprecated alias due to go in 5.40).
@pytest.mark.filterwarnings("error:.*past_key_values:FutureWarning")
def test_non_llama_model_runs_through_the_hf_fallback(tokenizer, arithmetic_prompts) -> None:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=64)
    model = sharpen_(GPT2LMHeadModel(config), std=0.2).eval()
    assert not llama_decoder.supports(model)
    engine = TorchEngine(model, tokenizer.pad_token_id)
    assert engine.fused is False
    assert isinstance(engine._get_decoder(), HFDecoder)

    out = engine.generate(arithmetic_prompts, SamplingParams(max_new_tokens=4, temperature=0.0))
    # reference: greedy decoding of each prompt alone with a plain full forward per token
    with torch.no_grad():
        for prompt, g in zip(arithmetic_prompts, out):
            seq, logprobs = list(prompt), []
            for _ in range(4):
                log_probs = model(torch.tensor([seq])).logits[0, -1].log_softmax(-1)
                token = int(log_probs.argmax())
                seq.append(token)
                logprobs.append(log_probs[token].item())
            assert g.token_ids == seq[len(prompt) :]
            assert g.logprobs == pytest.approx(logprobs, abs=logit_bound(model, [seq]))
            assert g.finish_reason == "length"

    sampled = engine.generate(arithmetic_prompts, SamplingParams(max_new_tokens=4, temperature=1.0), seed=0)
    assert all(len(g.token_ids) == 4 for g in sampled)


def test_the_c_decode_attention_shares_a_prompt_only_from_its_own_width(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    """With torch's attention a group's prompt is shared from MIN_SHARED_PROMPT tokens on, with the
    C decode attention (one thread, CPU float32) from MIN_SHARED_PROMPT_NATIVE on; the memory-fit
    preflight counts the same layout."""
    from reinforge.run.memory_fit import uses_native_decode
    from reinforge.config import load_config

    assert torch_engine.MIN_SHARED_PROMPT < torch_engine.MIN_SHARED_PROMPT_NATIVE
    width = torch_engine.MIN_SHARED_PROMPT + 5
    prompts = [p for p in [(q * 20)[:width] for q in arithmetic_prompts[:2]] for _ in range(3)]
    shared = {}
    for kernels in ("torch", "native"):
        engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id, decode_kernels=kernels)
        decoder, calls = engine._get_decoder(), []
        original = decoder.prefill_shared
        decoder.prefill_shared = lambda *a: calls.append(a[2]) or original(*a)
        engine.generate(prompts, SamplingParams(max_new_tokens=4, temperature=1.0), seed=0)
        shared[kernels] = calls
    assert shared == {"torch": [3], "native": []}
    assert torch_engine.min_shared_prompt(True) == torch_engine.MIN_SHARED_PROMPT_NATIVE
    assert uses_native_decode(load_config("default", ["trainer.threads=1"]))
    assert not uses_native_decode(load_config("default", ["trainer.threads=1", "engine.decode_kernels=torch"]))
    assert not uses_native_decode(load_config("default", ["trainer.threads=2"]))
