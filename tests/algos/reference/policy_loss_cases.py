"""Random policy-loss inputs for the reference comparisons: ragged and gapped masks, an empty
row, a zero-advantage row, ratios on both sides of the clip ranges (float64)."""

from __future__ import annotations

import torch

SEEDS = range(8)


def random_case(seed: int, n: int = 6, t: int = 9, spread: float = 0.5):
    """(logprobs [leaf, requires grad], old_logprobs, advantages [N], mask bool [N, T])."""
    g = torch.Generator().manual_seed(seed)
    logprobs = -3.0 * torch.rand(n, t, generator=g, dtype=torch.float64)
    old = logprobs + spread * torch.randn(n, t, generator=g, dtype=torch.float64)
    advantages = torch.randn(n, generator=g, dtype=torch.float64)
    advantages[1] = 0.0  # a group whose rewards were all equal
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    mask = torch.arange(t)[None, :] < lengths[:, None]
    mask &= torch.rand(n, t, generator=g) > 0.15  # gaps (env tokens inside a multi-turn episode)
    mask[0] = False  # an empty row
    mask[2, 0] = True  # at least one live row
    return logprobs.clone().requires_grad_(True), old, advantages, mask


def live_rows(mask: torch.Tensor) -> int:
    """verl's sequence means divide by the rows with a sampled token; reinforge's by all N rows."""
    return int((mask.sum(-1) > 0).sum())
