"""Truncated importance-sampling weights that correct for the rollout engine's own numerics.

    w_t = min( exp(logp_proximal_t - logp_behaviour_t), cap )   on sampled tokens, 0 elsewhere, detached

The behaviour log-probs are those the rollout engine (e.g. vLLM, or a stale policy version in
the async loop) reported when it sampled the token; the proximal ones are the learner's own
log-probs of the policy that is supposed to have produced the data (the `old_logprobs` of PPO).
The two differ (kernels, precision, staleness), so the "on-policy" data is in fact off-policy;
multiplying each token's loss by w_t corrects that, and the cap bounds the variance.

Source: Yao et al., "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training"
(2025), truncated importance sampling (TIS); cap C = 2 in their experiments. Pass the weights as
`PolicyLossParams.tis_weights`.

Metrics over sampled tokens: tis_weight_mean, tis_capped_frac (raw weight > cap).
"""

from __future__ import annotations

import torch


def truncated_is_weights(
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    mask = mask.bool()
    with torch.no_grad():
        zeros = torch.zeros_like(proximal_logprobs)
        raw = torch.exp(torch.where(mask, proximal_logprobs - behaviour_logprobs, zeros))
        weights = torch.where(mask, raw.clamp(max=cap), zeros)
        count = int(mask.sum())
        metrics = {
            "tis_weight_mean": weights.sum().item() / count if count else 0.0,
            "tis_capped_frac": (mask & (raw > cap)).sum().item() / count if count else 0.0,
        }
    return weights, metrics
