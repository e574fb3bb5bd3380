"""Policy losses: pure functions of log-probs, advantages and masks."""

from __future__ import annotations

import torch


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate with token-level aggregation.

        rho_t = exp(logp_t - logp_old_t)
        L = - sum_t mask_t * min(rho_t * A_t, clip(rho_t, 1 - eps, 1 + eps) * A_t) / Z

    Source: Schulman et al., "Proximal Policy Optimization Algorithms" (2017), eq. 7. Token-level
    aggregation (Z = number of unmasked tokens in the whole mini-batch, as in DAPO, Yu et al. 2025)
    weighs every sampled token equally. Pass `normalizer` = that count when the mini-batch is split
    into micro-batches, so the accumulated gradient equals the one of the full mini-batch.

    logprobs, old_logprobs, mask: [N, T]; advantages: [N] (broadcast over tokens) or [N, T].
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    mask = mask.to(logprobs.dtype)
    z = normalizer if normalizer is not None else mask.sum().clamp(min=1.0)
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -(torch.minimum(unclipped, clipped) * mask).sum() / z
    with torch.no_grad():
        tokens = mask.sum().clamp(min=1.0)
        metrics = {
            "clip_frac": (((unclipped > clipped).to(mask.dtype)) * mask).sum().item() / tokens.item(),
            "ratio_mean": (ratio * mask).sum().item() / tokens.item(),
            "approx_kl_old": ((ratio - 1 - log_ratio) * mask).sum().item() / tokens.item(),
        }
    return loss, metrics
