"""How far the rollout engine's log-probs are from the learner's, on the tokens the engine sampled.

    d_t = logp_learner_t - logp_engine_t            (sampled tokens only)
    logprob_gap/abs_mean  = mean_t |d_t|             logprob_gap/abs_max = max_t |d_t|
    logprob_gap/ratio_mean = mean_t exp(d_t)         logprob_gap/ratio_min, /ratio_max = min_t, max_t exp(d_t)

exp(d_t) is the per-token importance ratio pi_learner / pi_engine that truncated importance
sampling (reinforge.algos.losses.importance, `algo.tis_cap`) corrects with. An exact engine (same
weights, same dtype, same kernels) has d_t ~ 0 and every ratio ~ 1; a bf16 engine, vLLM's kernels
or an engine on another machine drift from the learner, and the drift is off-policy data the loss
does not know about (Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL
Training", 2025). Every RL step logs these (reinforge.trainer.advantage_step), whatever the engine.
The learner side is the policy before the step's update, so under an async schedule or partial
rollouts (behaviour = older weights) the gap also holds the data's staleness, not only numerics.

The means are over sampled tokens, so micro-batch values combine as token-weighted means; the
`_max` / `_min` keys combine by max / min (PolicyLearner.train_step, the data-parallel learner).
"""

from __future__ import annotations

import math

import torch

PREFIX = "logprob_gap/"

# What a micro-batch without sampled tokens reports: the neutral element of each combination
# (token weight 0 for the means, 0 for a max of non-negative values, +inf for a min), so every
# micro-batch and every data-parallel rank has the same keys and the combined values are those
# of the tokens that exist.
NO_TOKENS = {f"{PREFIX}abs_mean": 0.0, f"{PREFIX}abs_max": 0.0, f"{PREFIX}ratio_mean": 0.0,
             f"{PREFIX}ratio_min": math.inf, f"{PREFIX}ratio_max": 0.0}


def logprob_gap_metrics(learner_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The metrics above for [N, T] log-probs and a [N, T] mask of sampled tokens (NO_TOKENS when
    nothing was sampled)."""
    mask = mask.bool()
    if not mask.any():
        return dict(NO_TOKENS)
    with torch.no_grad():
        diff = (learner_logprobs.detach().double() - engine_logprobs.detach().double())[mask]
        ratio = torch.exp(diff)
        return {
            f"{PREFIX}abs_mean": diff.abs().mean().item(),
            f"{PREFIX}abs_max": diff.abs().max().item(),
            f"{PREFIX}ratio_mean": ratio.mean().item(),
            f"{PREFIX}ratio_min": ratio.min().item(),
            f"{PREFIX}ratio_max": ratio.max().item(),
        }


# A measured mean |engine - learner| log-prob above this means the engine is not exact: a float32
# TorchEngine on the learner's weights measures ~1e-7; bf16 on either side ~1e-3 even on a fresh,
# near-uniform nano model (tests/trainer/test_logprob_gap_step.py; docs/benchmarks.md, 'bf16').
GAP_WARNING_THRESHOLD = 1e-4


def measured_gap_warning(metrics: dict[str, float], tis_cap: float | None) -> str | None:
    """After the first RL step: the measured gap is large and nothing corrects it (else None)."""
    gap = metrics.get(f"{PREFIX}abs_mean")
    if tis_cap is not None or gap is None or gap <= GAP_WARNING_THRESHOLD:
        return None
    return (
        f"the rollout engine's log-probs differ from the learner's by {gap:.2g} nats per sampled token on average "
        f"(max {metrics.get(f'{PREFIX}abs_max', gap):.2g}; an exact engine: below {GAP_WARNING_THRESHOLD:g}) and "
        "algo.tis_cap is unset: the data is off-policy; set algo.tis_cap (e.g. 2.0) to correct it with truncated "
        "importance weights"
    )
