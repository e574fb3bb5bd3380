"""The learner's memory switches on real model classes: log-probs from hidden states in chunks
(algo.logprob_chunk_tokens), micro-batches by a token budget (algo.max_tokens_per_microbatch) and
activation checkpointing (algo.activation_checkpointing) compute the same log-probs and
gradients as the whole-logits, row-count, keep-everything learner."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from reinforge.config import LoraConfig, load_config
from reinforge.learner import policy_learner as policy_learner_module
from reinforge.learner.batch import TrainingBatch, micro_batches
from reinforge.learner.logprobs import output_layer, token_logprobs
from reinforge.learner.packed_forward import supports
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.models.lora import apply_lora, peft_available
from reinforge.learner.policy_objective import make_policy_objective
from float_bounds import assert_within, forward_bound, gradient_bound, network_sizes
from packed_batches import PAD, grpo_rows, right_padded, small


def gpt2():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=48, n_positions=128, n_embd=32, n_layer=2, n_head=4, pad_token_id=PAD)).eval()


MODELS = {
    "llama": lambda: small(LlamaForCausalLM, LlamaConfig),
    "llama, tied embeddings": lambda: small(LlamaForCausalLM, LlamaConfig, tie_word_embeddings=True),
    "gpt2 (tied, another decoder)": gpt2,
}


def logprobs_and_grads(model, ids, mask, weights, **kwargs):
    model.zero_grad()
    lp, ent = token_logprobs(model, ids, mask, 0.7, entropy_grad=True, **kwargs)
    ((lp + 0.1 * ent) * weights).sum().backward()
    return lp.detach(), ent.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same(model, ids, mask, a, b):
    """Log-probs to forward_bound at their scale, gradients to gradient_bound (tests/float_bounds.py)."""
    lp_a, ent_a, grads_a = a
    lp_b, ent_b, grads_b = b
    real = mask[:, 1:].bool()
    bound = forward_bound(model, lp_a.abs().max().item())
    assert_within(lp_b[real], lp_a[real], bound, "log-probs")
    assert_within(ent_b[real], ent_a[real], bound, "entropies")
    assert (lp_b[~real] == 0).all() and (ent_b[~real] == 0).all()
    assert grads_a.keys() == grads_b.keys() and grads_a
    layers, _ = network_sizes(model)
    for name, grad in grads_a.items():
        assert_within(grads_b[name], grad, gradient_bound(grad, int(real.sum()), layers + 1), name)


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("name", list(MODELS))
def test_chunked_logprobs_and_gradients_equal_the_whole_logits(name, pack):
    model = MODELS[name]()
    if pack and not supports(model):
        pytest.skip("the packed forward is for the Llama family (packed_forward.supports)")
    assert output_layer(model) is model.get_output_embeddings()
    ids, mask = right_padded(grpo_rows())
    weights = torch.randn(ids.shape[0], ids.shape[1] - 1, generator=torch.Generator().manual_seed(1))
    whole = logprobs_and_grads(model, ids, mask, weights, pack=pack, chunk_tokens=None)
    chunked = logprobs_and_grads(model, ids, mask, weights, pack=pack, chunk_tokens=7)  # many chunks, a ragged last one
    assert_same(model, ids, mask, whole, chunked)


def test_the_chunked_path_never_builds_whole_logits(monkeypatch):
    """The padded path runs the decoder, not the model's forward (which would make [N, T, V])."""
    model = small(LlamaForCausalLM, LlamaConfig)
    calls = []
    model.register_forward_pre_hook(lambda module, args: calls.append("forward"))
    model.lm_head.register_forward_pre_hook(lambda module, args: calls.append("lm_head"))
    ids, mask = right_padded(grpo_rows())
    token_logprobs(model, ids, mask, chunk_tokens=16)
    token_logprobs(model, ids, mask, pack=True, packed_kernels="torch", chunk_tokens=16)
    assert calls == []
    token_logprobs(model, ids, mask, chunk_tokens=None)
    assert calls == ["forward", "lm_head"]


@pytest.mark.skipif(not peft_available(), reason="needs peft (reinforge[lora])")
def test_lora_models_chunk_unless_lm_head_has_an_adapter():
    ids, mask = right_padded(grpo_rows())
    weights = torch.randn(ids.shape[0], ids.shape[1] - 1, generator=torch.Generator().manual_seed(1))
    for targets, chunks in ((["q_proj", "v_proj"], True), (["q_proj", "lm_head"], False)):
        model = apply_lora(small(LlamaForCausalLM, LlamaConfig), LoraConfig(r=4, target_modules=targets))
        with torch.no_grad():  # fresh adapters are zero (B = 0): give them a value, so that they matter
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(std=0.5)
        assert (output_layer(model) is not None) == chunks, targets
        for pack in (False, True):
            whole = logprobs_and_grads(model, ids, mask, weights, pack=pack, chunk_tokens=None)
            chunked = logprobs_and_grads(model, ids, mask, weights, pack=pack, chunk_tokens=7)
            assert_same(model, ids, mask, whole, chunked)
            assert all("lora_" in n for n in chunked[2])  # the adapters are all that is trained
            with model.disable_adapter():  # the reference of a LoRA policy: its base
                base, _ = token_logprobs(model, ids, mask, pack=pack, entropy=False, chunk_tokens=7)
            assert (base - chunked[0]).abs().max() > 1e-3


def test_micro_batches_by_a_token_budget_by_hand():
    lengths = [3, 5, 2, 6, 6, 1, 9]
    mask = torch.tensor([[1] * n + [0] * (9 - n) for n in lengths])
    # rows x the longest row <= 12: [3, 5] -> 2 x 5 = 10; + 2 -> 3 x 5 = 15 > 12: new micro-batch
    assert micro_batches(mask, 64, 12) == [slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 7)]
    # a row longer than the budget goes alone
    assert micro_batches(mask, 64, 4) == [slice(i, i + 1) for i in range(7)]
    assert micro_batches(mask, 3) == [slice(0, 3), slice(3, 6), slice(6, 7)]  # no budget: rows
    with pytest.raises(ValueError, match="max_tokens_per_microbatch must be positive"):
        micro_batches(mask, 3, 0)


def ragged_batch() -> TrainingBatch:
    rows = grpo_rows()
    ids, mask = right_padded(rows)
    loss_mask = mask[:, 1:].bool().clone()
    loss_mask[:, :4] = False  # the first 5 tokens are the prompt at least
    g = torch.Generator().manual_seed(2)
    old = (-torch.rand(loss_mask.shape, generator=g) * 4) * loss_mask
    return TrainingBatch(ids, mask, loss_mask, old, torch.randn(len(rows), generator=g))


@pytest.mark.parametrize("pack", [False, True])
@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean_token_mean"])
def test_token_budget_micro_batches_accumulate_the_one_batch_gradient(loss_agg, pack, monkeypatch):
    batch = ragged_batch()
    budget = 60
    slices = micro_batches(batch.attention_mask, 64, budget)
    sizes = [s.stop - s.start for s in slices]
    assert len(set(sizes)) > 1 and len(slices) > 2, sizes  # unequal micro-batches
    objective = make_policy_objective(load_config("default", [f"algo.loss_agg={loss_agg}"]).algo)
    start = small(LlamaForCausalLM, LlamaConfig)
    seen = []
    real = policy_learner_module.token_logprobs
    monkeypatch.setattr(policy_learner_module, "token_logprobs", lambda m, ids, *a, **k: seen.append(ids.numel()) or real(m, ids, *a, **k))

    def gradients(**kwargs):
        learner = PolicyLearner(copy.deepcopy(start), lr=1e-3, max_grad_norm=1e9, pack_sequences=pack, **kwargs)
        metrics = learner.train_step(batch, objective)
        return {n: p.grad for n, p in learner.model.named_parameters()}, metrics

    whole, whole_metrics = gradients(micro_batch_size=len(batch))
    assert seen == [batch.input_ids.numel()]
    accumulated, metrics = gradients(max_tokens_per_microbatch=budget)
    assert len(seen) == 1 + len(slices) and max(seen[1:]) <= budget
    layers, _ = network_sizes(start)
    for name, grad in whole.items():
        assert_within(accumulated[name], grad, gradient_bound(grad, batch.num_loss_tokens, layers + 1), name)
    assert metrics["loss"] == pytest.approx(whole_metrics["loss"], rel=1e-5, abs=1e-7)


def test_old_and_reference_logprobs_by_token_budget_equal_by_rows():
    batch = ragged_batch()
    model = small(LlamaForCausalLM, LlamaConfig)
    by_rows = PolicyLearner(model, lr=1e-3, micro_batch_size=len(batch)).logprobs(batch)
    by_budget = PolicyLearner(model, lr=1e-3, max_tokens_per_microbatch=40, logprob_chunk_tokens=5).logprobs(batch)
    reference = ReferenceModel(model, max_tokens_per_microbatch=40, logprob_chunk_tokens=5).logprobs(batch)
    bound = forward_bound(model, by_rows.abs().max().item())
    assert_within(by_budget, by_rows, bound, "old log-probs")
    assert_within(reference, by_rows, bound, "reference log-probs")
    assert (by_rows[~batch.attention_mask[:, 1:].bool()] == 0).all()


def test_the_logprob_passes_take_their_own_token_budget():
    """algo.logprob_max_tokens: the passes without gradients run by their budget, not the update's
    (fewer, larger micro-batches), and give the same log-probs."""
    batch = ragged_batch()
    model = small(LlamaForCausalLM, LlamaConfig)
    forwards = []
    model.model.register_forward_pre_hook(lambda module, args, kwargs: forwards.append(1), with_kwargs=True)
    update_budget, pass_budget = 20, 80
    micros = {b: len(micro_batches(batch.attention_mask, 64, b)) for b in (update_budget, pass_budget)}
    assert micros[pass_budget] < micros[update_budget]  # the batch is such that the budgets differ
    by_update_budget = PolicyLearner(model, lr=1e-3, max_tokens_per_microbatch=update_budget, pack_sequences=False).logprobs(batch)
    assert len(forwards) == micros[update_budget]
    forwards.clear()
    learner = PolicyLearner(model, lr=1e-3, max_tokens_per_microbatch=update_budget, logprob_max_tokens=pass_budget, pack_sequences=False)
    assert learner.max_tokens_per_microbatch == update_budget  # the update keeps its own
    by_pass_budget = learner.logprobs(batch)
    assert len(forwards) == micros[pass_budget]
    forwards.clear()
    reference = ReferenceModel(model, max_tokens_per_microbatch=update_budget, logprob_max_tokens=pass_budget, pack_sequences=False)
    by_reference = reference.logprobs(batch)
    assert len(forwards) == micros[pass_budget]
    bound = forward_bound(model, by_update_budget.abs().max().item())
    assert_within(by_pass_budget, by_update_budget, bound, "old log-probs")
    assert_within(by_reference, by_update_budget, bound, "reference log-probs")


def count_layer_runs(model) -> list[int]:
    runs = []
    for layer in model.model.layers:
        layer.mlp.down_proj.register_forward_pre_hook(lambda module, args: runs.append(1))
    return runs


@pytest.mark.parametrize("pack", [False, True])
def test_activation_checkpointing_recomputes_the_layers_and_gives_the_same_gradients(pack):
    batch = ragged_batch()
    objective = make_policy_objective(load_config("default", ["algo.entropy_coef=0.01"]).algo)
    start = small(LlamaForCausalLM, LlamaConfig)
    results = {}
    for checkpointing in (False, True):
        model = copy.deepcopy(start)
        runs = count_layer_runs(model)
        learner = PolicyLearner(
            model, lr=1e-3, max_grad_norm=1e9, pack_sequences=pack, entropy_grad=True, activation_checkpointing=checkpointing
        )
        learner.train_step(batch, objective)
        assert not any(m.training for m in model.modules())  # dropout stays off around the armed layers
        results[checkpointing] = ({n: p.grad for n, p in model.named_parameters()}, len(runs))
    layers = start.config.num_hidden_layers
    assert results[False][1] == layers and results[True][1] == 2 * layers  # forward, then again in the backward
    depth, _ = network_sizes(start)
    for name, grad in results[False][0].items():
        assert_within(results[True][0][name], grad, gradient_bound(grad, batch.num_loss_tokens, depth + 1), name)


def test_checkpointing_keeps_the_gradients_allocated_and_steps_as_if_they_were_freed():
    """Under checkpointing the learner zeroes its gradients in place between steps (the backward
    allocates none, reinforge.run.memory_fit); a second step then gives the weights, bit for bit,
    of a copy whose gradients were freed before it."""
    batch = ragged_batch()
    objective = make_policy_objective(load_config("default", []).algo)
    learner = PolicyLearner(small(LlamaForCausalLM, LlamaConfig), lr=1e-3, activation_checkpointing=True)
    learner.train_step(batch, objective)
    storages = [p.grad.data_ptr() for p in learner.trainable]
    freed = copy.deepcopy(learner)
    freed.optimizer.zero_grad(set_to_none=True)
    second = batch.select(torch.arange(len(batch) - 1, -1, -1))  # other rows, another gradient
    learner.train_step(second, objective)
    freed.train_step(second, objective)
    assert [p.grad.data_ptr() for p in learner.trainable] == storages
    for (name, kept), fresh in zip(learner.model.named_parameters(), freed.model.parameters()):
        assert torch.equal(kept, fresh), name
        assert torch.equal(kept.grad, fresh.grad), name


def test_the_config_keys_reach_the_learner_the_reference_and_the_critic():
    from reinforge.run.pipeline import build_critic, build_learners, build_reference

    overrides = [
        "algo.kl_coef=0.05", "algo.max_tokens_per_microbatch=300", "algo.logprob_chunk_tokens=64",
        "algo.activation_checkpointing=true", "critic.enabled=true", "algo.advantage=gae",
    ]
    cfg = load_config("default", overrides)
    model = small(LlamaForCausalLM, LlamaConfig)
    learner = build_learners(cfg, {"policy": model}, SimpleNamespace(max_turns=1))[0]["policy"]
    reference = build_reference(cfg, model)
    critic = build_critic(cfg, model, None)
    assert (learner.max_tokens_per_microbatch, learner.logprob_chunk_tokens, learner.activation_checkpointing) == (300, 64, True)
    assert model.model.layers[0].gradient_checkpointing
    assert (reference.max_tokens_per_microbatch, reference.logprob_chunk_tokens) == (300, 64)
    assert critic.max_tokens_per_microbatch == 300
    assert learner.logprob_max_tokens == 300  # unset: the update's budget
    cfg = load_config("default", [*overrides, "algo.logprob_max_tokens=900"])
    learner = build_learners(cfg, {"policy": model}, SimpleNamespace(max_turns=1))[0]["policy"]
    assert (learner.max_tokens_per_microbatch, learner.logprob_max_tokens, build_reference(cfg, model).max_tokens_per_microbatch) == (300, 900, 900)
    defaults = load_config("default", []).algo
    assert (defaults.max_tokens_per_microbatch, defaults.logprob_chunk_tokens, defaults.activation_checkpointing) == (None, 512, False)


@pytest.mark.parametrize("key", ["max_tokens_per_microbatch", "logprob_chunk_tokens", "logprob_max_tokens"])
def test_a_budget_that_is_not_a_positive_token_count_is_refused(key):
    with pytest.raises(Exception, match=key):
        load_config("default", [f"algo.{key}=0"])
    with pytest.raises(ValueError, match=f"algo.{key} must be a positive number of tokens"):
        PolicyLearner(small(LlamaForCausalLM, LlamaConfig), lr=1e-3, **{key: -5})
