"""Advantage estimators by name, as selected by `algo.advantage` (in the spirit of verl's registry)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from reinforge.algos.advantages import group_normalized_advantages

Estimator = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


@dataclass(frozen=True)
class EstimatorSpec:
    fn: Estimator
    min_group_size: int  # validated against rollout.group_size before any compute


ADVANTAGE_ESTIMATORS: dict[str, EstimatorSpec] = {
    "grpo": EstimatorSpec(group_normalized_advantages, min_group_size=2),
}


def get_estimator(name: str) -> EstimatorSpec:
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; valid: {', '.join(sorted(ADVANTAGE_ESTIMATORS))}")
    return ADVANTAGE_ESTIMATORS[name]
