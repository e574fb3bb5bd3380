"""collate / TrainingBatch.select, and PolicyLearner.train_step (accumulation, versioning, NaN guard)."""

from __future__ import annotations

import copy

import pytest
import torch

from reinforge.algos.policy_loss import ppo_clip_loss
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.learner.batch import collate
from reinforge.learner.logprobs import token_logprobs
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.rollout.trajectory import Trajectory
from float_bounds import adam_first_step_bound, assert_within, gradient_bound, logit_bound, network_sizes

PAD = 0


def trajectory(prompt: list[int], sampled: list[int], logprobs: list[float]) -> Trajectory:
    return Trajectory(
        task_id="t",
        group_id=0,
        token_ids=prompt + sampled,
        loss_mask=[False] * len(prompt) + [True] * len(sampled),
        behaviour_logprobs=[0.0] * len(prompt) + logprobs,
        turn_spans=[(len(prompt), len(prompt) + len(sampled))],
        prompt_length=len(prompt),
        response_text="",
        policy_version=0,
        finish_reason="stop",
    )


def hand_made_batch():
    long = trajectory([1, 10, 11], [20, 21, 22], [-0.1, -0.2, -0.3])  # length 6
    short = trajectory([1, 12], [23], [-0.4])  # length 3
    return collate([long, short], torch.tensor([1.0, -1.0], dtype=torch.float64), PAD)


def test_collate_shapes_and_alignment() -> None:
    batch = hand_made_batch()
    assert batch.input_ids.tolist() == [[1, 10, 11, 20, 21, 22], [1, 12, 23, PAD, PAD, PAD]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]]
    # position t predicts token t+1: the first sampled token (index 3 / 2) is predicted at 2 / 1
    assert batch.loss_mask.tolist() == [[False, False, True, True, True], [False, True, False, False, False]]
    torch.testing.assert_close(batch.old_logprobs, torch.tensor([[0, 0, -0.1, -0.2, -0.3], [0, -0.4, 0, 0, 0]]))
    assert batch.loss_mask.dtype == torch.bool
    assert batch.advantages.dtype == torch.float32 and batch.advantages.tolist() == [1.0, -1.0]
    assert batch.ref_logprobs is None
    assert len(batch) == 2 and batch.num_loss_tokens == 4


def test_select_trims_width_to_the_longest_selected_row() -> None:
    batch = hand_made_batch()
    batch.ref_logprobs = torch.full_like(batch.old_logprobs, -9.0)
    short = batch.select(slice(1, 2))
    assert short.input_ids.tolist() == [[1, 12, 23]]
    assert short.attention_mask.shape == (1, 3)
    assert short.loss_mask.tolist() == [[False, True]]
    torch.testing.assert_close(short.old_logprobs, torch.tensor([[0.0, -0.4]]))
    assert short.ref_logprobs.shape == (1, 2)
    assert short.advantages.tolist() == [-1.0]
    both = batch.select(torch.tensor([1, 0]))  # index tensors too, e.g. a shuffled mini-batch
    assert both.input_ids.shape == (2, 6)
    assert both.advantages.tolist() == [-1.0, 1.0]
    assert both.input_ids[1].tolist() == [1, 10, 11, 20, 21, 22]
    assert both.num_loss_tokens == 4


def ppo_loss(logprobs, entropy, micro, norm):
    return ppo_clip_loss(logprobs, micro.old_logprobs, micro.advantages, micro.loss_mask, 0.2, normalizer=norm.num_tokens)


@pytest.fixture(scope="module")
def rollout_batch(tokenizer):
    """8 ragged trajectories sampled from a fresh nano model, with non-trivial advantages."""
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    engine = TorchEngine(model, tokenizer.pad_token_id)
    texts = ["1+2=", "35+7=", "123+456=", "9=", "80+801=", "4+4=", "77+1=", "500+5="]
    prompts = [tokenizer(t).input_ids for t in texts]
    generations = engine.generate(prompts, SamplingParams(max_new_tokens=6, temperature=1.0), seed=0)
    trajectories = []
    for i, (prompt, g) in enumerate(zip(prompts, generations)):
        keep = 2 + i % 5  # ragged responses, so micro-batches have different widths
        trajectories.append(trajectory(prompt, g.token_ids[:keep], g.logprobs[:keep]))
    advantages = torch.linspace(-1.5, 2.0, len(trajectories))
    batch = collate(trajectories, advantages, tokenizer.pad_token_id)
    # Move the behaviour log-probs away from the current policy so some ratios are clipped.
    noise = torch.randn(batch.old_logprobs.shape, generator=torch.Generator().manual_seed(0)) * 0.3
    batch.old_logprobs = batch.old_logprobs + noise * batch.loss_mask
    return batch


def run_step(tokenizer, batch, micro_batch_size: int):
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    before = copy.deepcopy(model.state_dict())
    learner = PolicyLearner(model, lr=1e-3, max_grad_norm=1.0, micro_batch_size=micro_batch_size)
    metrics = learner.train_step(batch, ppo_loss)
    updates = {name: model.state_dict()[name] - before[name] for name in before}
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    return updates, grads, metrics, before


@pytest.mark.parametrize("micro_batch_size", [2, 3])
def test_gradient_accumulation_matches_one_full_batch(tokenizer, rollout_batch, micro_batch_size) -> None:
    full_updates, full_grads, full_metrics, start = run_step(tokenizer, rollout_batch, micro_batch_size=8)
    micro_updates, micro_grads, micro_metrics, _ = run_step(tokenizer, rollout_batch, micro_batch_size)

    assert 0.0 < full_metrics["clip_frac"] < 1.0  # the clipped branch is exercised
    assert max(u.abs().max().item() for u in full_updates.values()) > 1e-4  # the step did something
    # Accumulating micro-batches adds in another order: equal up to float32 noise (tests/float_bounds.py).
    layers, _ = network_sizes(build_tiny_llama(tokenizer, "nano", seed=0))
    tokens = int(rollout_batch.loss_mask.sum())
    for name in full_grads:
        assert_within(micro_grads[name], full_grads[name], gradient_bound(full_grads[name], tokens, layers + 1), name)
        # Adam's first step is ~lr * sign(grad): where |grad| is near Adam's eps float noise in the
        # gradient moves the update by a fraction of lr; adam_first_step_bound says how far.
        bound = adam_first_step_bound(start[name], micro_grads[name], full_grads[name], lr=1e-3)
        assert_within(micro_updates[name], full_updates[name], bound, name)
    # Scalars summed over tokens: relative error ~ sqrt(tokens) * EPS32 per sum, SLACK-fold (<1e-5).
    rel = gradient_bound(torch.ones(1), tokens, layers + 1)
    assert micro_metrics["grad_norm"] == pytest.approx(full_metrics["grad_norm"], rel=rel)
    assert micro_metrics["loss"] == pytest.approx(full_metrics["loss"], rel=rel, abs=rel)
    assert micro_metrics["entropy"] == pytest.approx(full_metrics["entropy"], rel=rel)


def test_without_the_normalizer_micro_batches_weigh_tokens_differently(tokenizer, rollout_batch) -> None:
    """Control for the test above: per-micro-batch normalisation does change the gradient."""

    def per_micro_mean(logprobs, entropy, micro, normalizer):
        return ppo_clip_loss(logprobs, micro.old_logprobs, micro.advantages, micro.loss_mask, 0.2)

    grads = []
    for size in (8, 2):
        model = build_tiny_llama(tokenizer, "nano", seed=0)
        PolicyLearner(model, lr=1e-3, max_grad_norm=1e9, micro_batch_size=size).train_step(rollout_batch, per_micro_mean)
        grads.append(model.lm_head.weight.grad.clone())
    assert (grads[0] - grads[1]).abs().max().item() > 1e-5


def test_version_increments_on_every_step(tokenizer, rollout_batch) -> None:
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    learner = PolicyLearner(model, lr=1e-3, micro_batch_size=4)
    assert learner.version == 0
    learner.train_step(rollout_batch, ppo_loss)
    assert learner.version == 1
    learner.train_step(rollout_batch.select(slice(0, 4)), ppo_loss)
    assert learner.version == 2
    assert not model.training  # RL updates run with dropout off (tests/learner/test_rl_dropout_off.py)


def test_non_finite_gradients_raise_and_leave_the_weights_alone(tokenizer, rollout_batch) -> None:
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    before = copy.deepcopy(model.state_dict())
    learner = PolicyLearner(model, lr=1e-3, micro_batch_size=4)

    def nan_loss(logprobs, entropy, micro, normalizer):
        return (logprobs * micro.loss_mask).sum() * float("nan"), {}

    with pytest.raises(FloatingPointError, match="non-finite"):
        learner.train_step(rollout_batch, nan_loss)
    assert learner.version == 0
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    # a good step afterwards still works (gradients are reset at the start of each step)
    metrics = learner.train_step(rollout_batch, ppo_loss)
    assert learner.version == 1 and torch.isfinite(torch.tensor(metrics["grad_norm"]))


def test_learner_logprobs_and_frozen_reference(tokenizer, rollout_batch) -> None:
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    reference = ReferenceModel(model, micro_batch_size=3)
    learner = PolicyLearner(model, lr=1e-2, micro_batch_size=3)
    with torch.no_grad():
        direct, _ = token_logprobs(model, rollout_batch.input_ids, rollout_batch.attention_mask)
    mask = rollout_batch.loss_mask
    # micro-batched (trimmed widths) == one forward on the whole batch, on the trained positions,
    # up to float32 noise (tests/float_bounds.py); an off-by-one position moves them by >1e-2
    noise = logit_bound(model, [row[m].tolist() for row, m in zip(rollout_batch.input_ids, rollout_batch.attention_mask.bool())])
    assert (learner.logprobs(rollout_batch) - direct)[mask].abs().max().item() < noise
    ref_before = reference.logprobs(rollout_batch)
    assert (ref_before - direct)[mask].abs().max().item() < noise
    learner.train_step(rollout_batch, ppo_loss)
    assert (learner.logprobs(rollout_batch) - direct)[mask].abs().max().item() > 1e-4  # policy moved
    assert torch.equal(reference.logprobs(rollout_batch), ref_before)  # reference did not
    assert not any(p.requires_grad for p in reference.model.parameters())


def test_the_optimizer_is_torchs_fused_adamw_and_steps_as_the_for_loop_one(tokenizer, rollout_batch) -> None:
    """Plain CPU parameters get the fused AdamW (as transformers' Trainer does with torch >= 2.8);
    two steps on the same gradients move the weights as the for-loop AdamW does, to rounding."""
    from reinforge.learner.policy_learner import fused_adamw_fits

    model = build_tiny_llama(tokenizer, "nano", seed=0)
    loop_model = copy.deepcopy(model)
    learner = PolicyLearner(model, lr=1e-3, micro_batch_size=4, weight_decay=0.1)
    assert learner.optimizer.defaults["fused"] is True
    loop = torch.optim.AdamW(loop_model.parameters(), lr=1e-3, weight_decay=0.1, foreach=False)
    for _ in range(2):
        learner.train_step(rollout_batch, ppo_loss)
        for p, q in zip(model.parameters(), loop_model.parameters()):
            q.grad = p.grad.clone()  # the clipped gradients the fused step used
        loop.step()
        moved = max((p - q).abs().max().item() for p, q in zip(model.parameters(), loop_model.parameters()))
        assert moved <= 1e-3 * 1e-4, moved  # lr x a rounding-sized share of a step
        for p, q in zip(model.parameters(), loop_model.parameters()):
            q.data.copy_(p.data)  # the next step starts from the same weights
    assert not fused_adamw_fits([])
    assert not fused_adamw_fits([torch.nn.Parameter(torch.zeros(2, dtype=torch.float64))])
