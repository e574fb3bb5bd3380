"""Two learners compared step by step from identical states ("teacher forcing").

Two runs of the same training that add in another order (2 data-parallel ranks vs 1 process,
another kernel or thread count) agree after one step up to float noise, but not after several:
from step 2 on they start from different weights, and Adam maps rounding in a near-zero gradient
entry to up to 2 * lr in its weight (tests/float_bounds.py), so no honest bound exists for the
weights after k steps short of "2 * k * lr", which a real bug (a dropped or doubled shard: Adam
steps are ~lr * sign(g) either way) stays inside. So each step is checked on its own: record the
state a learner starts a step from (weights, AdamW moments, version), its batch, and what the step
produced (the gradients the optimizer saw, the weights after, the logged metrics); give a
reference learner that same state and batch; then

- the gradients agree within gradient_bound (float32 summation order),
- the weights after agree within adam_step_bound (the same step t, moments from the shared history),
- every logged metric agrees within what the forward's rounding can move it (`metric_bounds`).

A wrong gradient (a shard dropped or counted twice, a follower training from other weights)
fails the first check; a wrong optimizer state or step the second.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable

import torch

from float_bounds import EPS32, SLACK, adam_step_bound, assert_within, forward_bound, gradient_bound, network_sizes
from reinforge.config import AlgoConfig
from reinforge.learner.batch import TrainingBatch
from reinforge.learner.policy_learner import PolicyLearner


@dataclasses.dataclass
class LearnerState:
    model: dict[str, torch.Tensor]
    optimizer: dict
    version: int


@dataclasses.dataclass
class StepOutcome:
    grads: dict[str, torch.Tensor]  # what the optimizer saw: reduced over ranks and clipped
    weights: dict[str, torch.Tensor]  # parameters after the step
    metrics: dict[str, float]


@dataclasses.dataclass
class RecordedStep:
    before: LearnerState
    batch: TrainingBatch  # the whole batch (all ranks' shards)
    loss_fn: Callable
    outcome: StepOutcome


def snapshot(learner: PolicyLearner) -> LearnerState:
    return LearnerState(
        {k: v.detach().clone() for k, v in learner.model.state_dict().items()},
        copy.deepcopy(learner.optimizer.state_dict()),
        learner.version,
    )


def restore(learner: PolicyLearner, state: LearnerState) -> None:
    learner.model.load_state_dict(state.model)
    learner.optimizer.load_state_dict(copy.deepcopy(state.optimizer))
    learner.version = state.version


def outcome(learner: PolicyLearner, metrics: dict[str, float]) -> StepOutcome:
    params = dict(learner.model.named_parameters())
    return StepOutcome(
        {k: p.grad.detach().clone() for k, p in params.items() if p.requires_grad},  # LoRA: the adapters only
        {k: p.detach().clone() for k, p in params.items()}, dict(metrics),
    )


def recorded_step(learner: PolicyLearner, batch: TrainingBatch, loss_fn: Callable, shard: TrainingBatch | None = None) -> RecordedStep:
    """Take one step of `learner` on `shard` (default: the whole `batch`) and record it."""
    before = snapshot(learner)
    metrics = learner.train_step(batch if shard is None else shard, loss_fn)
    return RecordedStep(before, batch, loss_fn, outcome(learner, metrics))


def single_twin(learner: PolicyLearner) -> PolicyLearner:
    """A single-process PolicyLearner with `learner`'s model architecture and settings."""
    group = learner.optimizer.param_groups[0]
    return PolicyLearner(
        copy.deepcopy(learner.model), lr=group["lr"], weight_decay=group["weight_decay"], max_grad_norm=learner.max_grad_norm,
        micro_batch_size=learner.micro_batch_size, bf16_autocast=learner.bf16_autocast, temperature=learner.temperature,
        max_response_tokens=learner.max_response_tokens, entropy_grad=learner.entropy_grad,
    )


def assert_same_batch(a: TrainingBatch, b: TrainingBatch) -> None:
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        assert (x is None and y is None) or torch.equal(x, y), f"batches differ in {field.name}"


def replay(reference: PolicyLearner, step: RecordedStep) -> StepOutcome:
    """`reference`'s step from `step`'s state on its whole batch."""
    restore(reference, step.before)
    return outcome(reference, reference.train_step(step.batch, step.loss_fn))


def assert_replays(reference: PolicyLearner, steps: list[RecordedStep], algo: AlgoConfig) -> None:
    """Every recorded step is the step `reference` takes from the same state on the same batch."""
    for i, step in enumerate(steps):
        restore(reference, step.before)
        bounds = metric_bounds(reference, step.batch, algo)
        expected = replay(reference, step)
        assert_steps_agree(reference, step.before, step.batch, bounds, step.outcome, expected, f"step {i + 1}")


def assert_steps_agree(
    learner: PolicyLearner, before: LearnerState, batch: TrainingBatch, bounds: MetricBounds, a: StepOutcome, b: StepOutcome, what: str
) -> None:
    """`a` and `b` are steps from `before` on `batch` that differ only in summation order."""
    assert not learner.bf16_autocast, "these are float32 bounds"
    layers, _ = network_sizes(learner.model)
    group = before.optimizer["param_groups"]
    assert len(group) == 1, "one parameter group (PolicyLearner's AdamW)"
    group = group[0]
    # What the optimizer holds, in its order (LoRA: the adapters; the frozen base has no gradient or step)
    names = [name for name, p in learner.model.named_parameters() if p.requires_grad]
    for index, name in enumerate(names):
        ga, gb = a.grads[name], b.grads[name]
        assert_within(ga, gb, gradient_bound(gb, batch.num_loss_tokens, layers + 1), f"{what}: gradient of {name}")
        bound = adam_step_bound(
            before.model[name], ga, gb, group["lr"], before.optimizer["state"].get(index), group["betas"], group["eps"]
        )
        assert_within(a.weights[name], b.weights[name], bound, f"{what}: {name} after the step")
    assert a.metrics.keys() == b.metrics.keys(), what
    for key in a.metrics:
        bound = bounds.of(key, b, batch.num_loss_tokens, layers + 1)
        assert abs(a.metrics[key] - b.metrics[key]) <= bound, f"{what}: {key} {a.metrics[key]} vs {b.metrics[key]}, bound {bound:.3g}"


@dataclasses.dataclass
class MetricBounds:
    smooth: float  # any metric that is a weighted mean of smooth per-token terms (loss, ratio, KLs, entropy)
    fraction: float  # clip_frac*, tis_capped_frac: tokens near a threshold may cross it
    max_grad_norm: float

    def of(self, key: str, step: StepOutcome, terms: int, depth: int) -> float:
        if "frac" in key:
            return self.fraction
        if key == "grad_norm":
            return grad_norm_bound(step, self.max_grad_norm, terms, depth)
        return self.smooth


def grad_norm_bound(step: StepOutcome, max_grad_norm: float, terms: int, depth: int) -> float:
    """The logged norm is that of the gradients before clipping (g_pre = g / c, c the clip factor
    min(1, max_norm / (norm + 1e-6))); a norm moves by at most the norm of the difference, each
    entry within gradient_bound, plus the rounding of the norm's own sum over all entries."""
    norm = step.metrics["grad_norm"]
    clip = min(1.0, max_grad_norm / (norm + 1e-6))
    pre = [g / clip for g in step.grads.values()]
    noise = math.sqrt(sum(g.numel() * gradient_bound(g, terms, depth) ** 2 for g in pre))
    entries = sum(g.numel() for g in pre)
    return noise + SLACK * math.sqrt(entries) * EPS32 * norm


@torch.no_grad()
def metric_bounds(learner: PolicyLearner, batch: TrainingBatch, algo: AlgoConfig) -> MetricBounds:
    """How far each metric of one step on `batch` from `learner`'s current state may move when
    only the summation order of the forward differs (micro-batch shapes, ranks, kernels, threads).

    One forward of the whole batch gives the logits' scale (the largest |logit| on a sampled
    token), so each log-prob errs by at most d = forward_bound(model, scale) and each entropy
    H = logsumexp(z) - sum p z by at most dH = 2 * scale * d (dH/dz_i = -p_i (z_i - zbar), so
    sum_i |dH/dz_i| <= max |z_i - zbar| <= 2 * scale). Every logged metric except the fractions
    and the gradient norm is a mean, with weights summing to at most 1 (token mean, sequence mean
    or a constant normalizer >= the token count), of per-token terms whose slope in the token's
    log-prob is at most
        K_t = e^(2d) * (|A_t| r_t rho_t + 1 + r_t + rho_t + kl_coef * (1 + |lp_t - ref_t| + e^(ref_t - lp_t)))
    (the PPO-clip term -A min(r, clip r) rho and dual clip: |A| r rho, r = e^(lp - old) and rho the
    TIS weight, r = 1 and rho = min(e^(lp - behaviour), cap) in the folded mode; ratio_mean: r;
    approx_kl_old = r - 1 - log r: |r - 1|; tis_weight_mean: rho; the k1, k2, k3 KL estimators:
    1, |lp - ref|, |1 - e^(ref - lp)|) plus (1 + entropy_coef) times their entropy. So
        smooth = d * max_t K_t + (1 + entropy_coef) * dH + SLACK * sqrt(n) * EPS32 * T,
    the last term the rounding of the sums themselves (n tokens, terms at most T). A fraction
    moves by 1/n per token that crosses its threshold, and only a token whose log-ratio lies within
    2d of one (log(1 - eps_low), log(1 + eps_high), log c, log cap) can; the gradient norm moves
    by at most the norm of the gradients' own bound, sqrt(sum_p numel_p * gradient_bound_p^2),
    relative to the norm. Only ppo_clip's metrics are derived here.
    """
    assert algo.policy_loss == "ppo_clip", "metric bounds are derived for ppo_clip's metrics only"
    model = learner.model
    was_training = model.training
    model.eval()
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False).logits[:, :-1].float()
    model.train(was_training)
    logits = logits / learner.temperature
    mask = batch.loss_mask.bool()
    n = int(mask.sum())
    scale = logits[mask].abs().max().item()
    d = forward_bound(model, scale)
    d_entropy = 2 * scale * d
    log_probs = logits.log_softmax(-1)
    lp = log_probs.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1).double()
    entropy = -(log_probs.exp() * log_probs).sum(-1).double()[mask]
    advantages = batch.advantages if batch.advantages.dim() == 2 else batch.advantages[:, None].expand_as(lp)
    adv = advantages.double()[mask].abs()

    # behaviour_logprobs without a cap only feed the gap metrics (|lp - behaviour|, e^(lp - behaviour):
    # slopes 1 and r, inside the bound below); with a cap the proximal forward is folded (TIS).
    folded = batch.behaviour_logprobs is not None and algo.tis_cap is not None
    log_ratio = torch.zeros_like(lp[mask]) if folded else (lp - batch.old_logprobs.double())[mask]
    if folded:
        log_rho = (lp - batch.behaviour_logprobs.double())[mask]
        rho = log_rho.exp().clamp(max=algo.tis_cap)
    else:
        log_rho = None
        rho = batch.tis_weights.double()[mask] if batch.tis_weights is not None else torch.ones_like(adv)
    ratio = log_ratio.exp()
    kl_slope = kl_size = torch.zeros_like(adv)
    if algo.kl_coef > 0 and batch.ref_logprobs is not None:
        to_ref = (batch.ref_logprobs.double() - lp)[mask]
        kl_slope = algo.kl_coef * (1 + to_ref.abs() + to_ref.exp())
        kl_size = algo.kl_coef * (to_ref.abs() + to_ref.exp() + to_ref**2)  # k1, k2, k3 are each below this
    policy = adv * ratio * rho
    slope = math.exp(2 * d) * (policy + 1 + ratio + rho + kl_slope)
    size = policy + 1 + ratio + rho + log_ratio.abs() + kl_size + (1 + algo.entropy_coef) * entropy
    rounding = SLACK * math.sqrt(n) * EPS32
    smooth = d * slope.max().item() + (1 + algo.entropy_coef) * d_entropy + rounding * size.max().item()

    high = algo.clip_eps_high if algo.clip_eps_high is not None else algo.clip_eps
    thresholds = [math.log(1 - algo.clip_eps), math.log(1 + high)]
    if algo.dual_clip_c is not None:
        thresholds.append(math.log(algo.dual_clip_c))
    near = torch.zeros_like(adv, dtype=torch.bool)
    for threshold in thresholds:
        near |= (log_ratio - threshold).abs() <= 2 * d
    if log_rho is not None:
        near |= (log_rho - math.log(algo.tis_cap)).abs() <= 2 * d
    fraction = int(near.sum()) / n + rounding

    return MetricBounds(smooth, fraction, learner.max_grad_norm)
