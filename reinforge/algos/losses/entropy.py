"""Entropy of the policy's next-token distribution at every position, for an entropy bonus.

    H_t = -sum_v p_v log p_v = logsumexp(z) - sum_v softmax(z)_v z_v,   z = logits[n, t, :]

Subtract `coef * aggregate(H, mask, ...)` from the loss to keep the policy exploring (an entropy
bonus as in Mnih et al., "Asynchronous Methods for Deep Reinforcement Learning", 2016).
"""

from __future__ import annotations

import torch


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """[N, T, V] logits -> [N, T] entropies (nats), differentiable."""
    # -inf logits (a masked vocabulary) would give 0 * -inf = nan; the most negative finite value
    # gives p = 0 exactly and a finite gradient.
    logits = logits.clamp(min=torch.finfo(logits.dtype).min)
    log_p = torch.log_softmax(logits, dim=-1)
    return -(log_p.exp() * log_p).sum(-1)
