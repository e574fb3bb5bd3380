"""PCL's selection rule: of a pool of candidate prompts, keep those whose predicted pass rate is nearest a target.

Prompt Curriculum Learning (Gao et al., "Prompt Curriculum Learning for Efficient LLM Post-Training",
2025, arXiv:2510.01135): each step, a pool of k*m candidate prompts is scored by a value model trained
on the current policy's outcomes, and the m prompts with

    argmin_x |V(x) - tau|,   tau = 0.5 by default

are sampled. For a binary reward the expected squared advantage of a prompt with pass rate p is
p(1 - p), largest at p = 0.5, and a group of n samples has all-equal rewards with probability
p^n + (1 - p)^n, smallest there too: the selected prompts give informative groups before any token is
spent on the others.
"""

from __future__ import annotations

import torch


def nearest_to_target(predicted: torch.Tensor, count: int, target: float = 0.5) -> list[int]:
    """Indices of the `count` predictions nearest `target`, nearest first; ties keep pool order."""
    return nearest_items((predicted.double() - target).abs(), count)


def nearest_items(distance: torch.Tensor, count: int) -> list[int]:
    """Indices of the `count` smallest distances from the target (an item of several trained seats:
    their mean distance), nearest first; ties keep pool order."""
    if not 0 < count <= distance.numel():
        raise ValueError(f"cannot select {count} prompts from a pool of {distance.numel()}")
    order = torch.sort(distance, stable=True).indices  # stable: equal distances keep the pool's (shuffled) order
    return order[:count].tolist()


def mean_per_item(seat_values: torch.Tensor, owner: torch.Tensor, items: int) -> torch.Tensor:
    """[items]: the mean of each item's seats' values (`owner`: each seat's item; one seat: its value)."""
    total = torch.zeros(items, dtype=torch.float64).index_add_(0, owner, seat_values)
    return total / torch.bincount(owner, minlength=items).double()
