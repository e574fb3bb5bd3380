"""Each group's mean |advantage|: the learnability DUMP's bandit learns per distribution (reinforge.values.dump)."""

from __future__ import annotations

from collections import defaultdict

import torch

from reinforge.rollout.trajectory import Trajectory


def group_abs_advantages(trajectories: list[Trajectory], advantages: torch.Tensor, mask: torch.Tensor) -> dict[int, float]:
    """Mean |advantage| of each group's samples (a per-token advantage: its mean over sampled tokens)."""
    return merged_group_abs_advantages([(trajectories, advantages, mask)])


def merged_group_abs_advantages(parts: list[tuple[list[Trajectory], torch.Tensor, torch.Tensor]]) -> dict[int, float]:
    """The same over several batches (trajectories, advantages, loss mask): each policy's, where a
    game's group holds the rows of every policy that plays it."""
    sums: dict[int, list[float]] = defaultdict(list)
    for trajectories, advantages, mask in parts:
        per_sample = advantages.double().abs()
        if per_sample.dim() == 2:
            m = mask.double()
            per_sample = (per_sample * m).sum(1) / m.sum(1).clamp(min=1)
        for t, a in zip(trajectories, per_sample.tolist()):
            sums[t.group_id].append(a)
    return {g: sum(v) / len(v) for g, v in sums.items()}
