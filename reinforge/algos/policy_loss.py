"""The PPO loss under its first name, kept for existing callers; the losses live in `algos.losses`."""

from __future__ import annotations

import torch

from reinforge.algos.losses.aggregation import aggregate
from reinforge.algos.losses.policy import PolicyLossParams
from reinforge.algos.losses.ppo_clip import ppo_clip
from reinforge.algos.types import LossNormalizer


def ppo_clip_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate (symmetric clip_eps) with token_mean aggregation.

        L = - sum_t mask_t * min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps) A_t) / Z

    Z = `normalizer` (the number of sampled tokens in the whole mini-batch, so micro-batch losses
    add up), or this batch's own count when None. See losses/ppo_clip.py and losses/aggregation.py.
    """
    mask = mask.bool()
    n, t = mask.shape
    num_tokens = normalizer if normalizer is not None else int(mask.sum())
    norm = LossNormalizer(num_tokens=num_tokens, num_sequences=n, max_response_tokens=t)
    per_token, metrics = ppo_clip(logprobs, old_logprobs, advantages, mask, PolicyLossParams(clip_eps, clip_eps))
    return aggregate(per_token, mask, "token_mean", norm), metrics
