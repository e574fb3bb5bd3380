"""Truncated importance-sampling weights that correct for the rollout engine's own numerics.

    w_t = min( exp(logp_proximal_t - logp_behaviour_t), cap )   on sampled tokens, 0 elsewhere, detached
    w_t = clip( exp(logp_proximal_t - logp_behaviour_t), floor, cap )          with a lower clip (floor)

The behaviour log-probs are those the rollout engine (e.g. vLLM, or a stale policy version in
the async loop) reported when it sampled the token; the proximal ones are the learner's own
log-probs of the policy that is supposed to have produced the data (the `old_logprobs` of PPO).
The two differ (kernels, precision, staleness), so the "on-policy" data is in fact off-policy;
multiplying each token's loss by w_t corrects that, and the cap bounds the variance.

Source: Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
(2025), truncated importance sampling (TIS); cap C = 2 in their experiments. Pass the weights as
`PolicyLossParams.tis_weights`. The optional lower clip (`algo.tis_floor`) keeps a token the
learner finds far less likely than the engine did from losing its gradient altogether; it is
TRL's `vllm_importance_sampling_clip_min` of the `*_truncate` modes (clamp(r, min, max)).

Metrics over sampled tokens: tis_weight_mean, tis_capped_frac (raw weight > cap), and with a
floor tis_floored_frac (raw weight < floor).
"""

from __future__ import annotations

import torch


def truncated_is_weights(
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
    floor: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    if floor is not None and not 0 < floor <= cap:
        raise ValueError(f"floor must be in (0, cap={cap}], got {floor}")
    mask = mask.bool()
    with torch.no_grad():
        zeros = torch.zeros_like(proximal_logprobs)
        raw = torch.exp(torch.where(mask, proximal_logprobs - behaviour_logprobs, zeros))
        weights = torch.where(mask, raw.clamp(min=floor, max=cap), zeros)
        count = int(mask.sum())
        metrics = {
            "tis_weight_mean": weights.sum().item() / count if count else 0.0,
            "tis_capped_frac": (mask & (raw > cap)).sum().item() / count if count else 0.0,
        }
        if floor is not None:
            metrics["tis_floored_frac"] = (mask & (raw < floor)).sum().item() / count if count else 0.0
    return weights, metrics
