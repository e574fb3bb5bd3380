"""Turning per-token loss terms into one scalar: the choice decides how much each token weighs.

With l[i, t] the per-token term, m[i, t] the mask, n_i = sum_t m[i, t] and the mini-batch counts
of `LossNormalizer` (num_tokens, num_sequences = N, max_response_tokens = L):

    token_mean           sum_{i,t} m l / num_tokens                   DAPO (Yu et al. 2025): every token
                                                                       of the mini-batch weighs the same.
    seq_mean_token_mean  sum_i (sum_t m l / n_i) / N                  original GRPO (Shao et al. 2024, eq. 3):
                                                                       every sequence weighs the same, so a
                                                                       short response's tokens weigh more.
    seq_mean_token_sum   sum_{i,t} m l / N                            sum over a sequence, mean over
                                                                       sequences: a long response weighs more.
    constant             sum_{i,t} m l / (N * L)                      Dr. GRPO (Liu et al. 2025, "Understanding
                                                                       R1-Zero-Like Training"): a constant
                                                                       divisor, so no weight depends on lengths.

The counts come from the whole mini-batch (and n_i from the row itself), so the aggregates of
disjoint row-subsets (micro-batches) add up to the aggregate of the mini-batch, and so do their
gradients.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from reinforge.algos.types import LossNormalizer


def _masked_sum(per_token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.bool(), per_token, torch.zeros_like(per_token)).sum()


def _count(value: float) -> float:
    # An all-masked mini-batch has a zero sum; divide it by 1, not by 0.
    return max(float(value), 1.0)


def token_mean(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNormalizer) -> torch.Tensor:
    return _masked_sum(per_token, mask) / _count(norm.num_tokens)


def seq_mean_token_mean(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNormalizer) -> torch.Tensor:
    mask = mask.bool()
    per_seq = torch.where(mask, per_token, torch.zeros_like(per_token)).sum(-1)
    lengths = mask.sum(-1).clamp(min=1).to(per_token.dtype)
    return (per_seq / lengths).sum() / _count(norm.num_sequences)


def seq_mean_token_sum(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNormalizer) -> torch.Tensor:
    return _masked_sum(per_token, mask) / _count(norm.num_sequences)


def constant(per_token: torch.Tensor, mask: torch.Tensor, norm: LossNormalizer) -> torch.Tensor:
    return _masked_sum(per_token, mask) / _count(norm.num_sequences * norm.max_response_tokens)


Aggregation = Callable[[torch.Tensor, torch.Tensor, LossNormalizer], torch.Tensor]

AGGREGATIONS: dict[str, Aggregation] = {
    "token_mean": token_mean,
    "seq_mean_token_mean": seq_mean_token_mean,
    "seq_mean_token_sum": seq_mean_token_sum,
    "constant": constant,
}


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, mode: str, norm: LossNormalizer) -> torch.Tensor:
    """One scalar from per-token terms [N, T]; `mode` is a key of AGGREGATIONS (see module docstring)."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; valid: {', '.join(sorted(AGGREGATIONS))}")
    return AGGREGATIONS[mode](per_token, mask, norm)
