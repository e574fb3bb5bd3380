"""grpo on groups of unequal size (the shared 12-sample example lives in test_grpo_advantages.py)."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs


def run(rewards: list[float], groups: list[int], **kw: object) -> tuple[list[float], dict[str, float]]:
    n = len(rewards)
    inputs = AdvantageInputs(torch.tensor(rewards), torch.tensor(groups), torch.ones(n, 1, dtype=torch.bool), **kw)
    out = get_estimator("grpo").fn(inputs)
    assert out.advantages.dtype == torch.float32 and out.returns is None
    return out.advantages.tolist(), out.metrics


def test_unequal_group_sizes_interleaved() -> None:
    # group 5: rewards 2, 0       mean 1, centered +-1, var (1 + 1) / 1 = 2, std 1.4142136 -> +-0.7071068
    # group 9: rewards 3, 0, 0    mean 1, centered 2,-1,-1, var (4 + 1 + 1) / 2 = 3, std 1.7320508
    #                             -> 1.1547005, -0.5773503, -0.5773503
    # group 1: rewards 4, 4       zero variance -> 0, 0
    adv, metrics = run([2.0, 3.0, 4.0, 0.0, 0.0, 4.0, 0.0], [5, 9, 1, 9, 5, 1, 9])
    assert adv == pytest.approx([0.7071068, 1.1547005, 0.0, -0.5773503, -0.7071068, 0.0, -0.5773503], abs=1e-5)
    assert adv[2] == 0.0 and adv[5] == 0.0
    assert metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)


def test_eps_is_added_to_the_std() -> None:
    # [1, 0]: centered +-0.5, unbiased std 0.7071068; with eps = 0.2928932 the denominator is 1.0000000.
    adv, _ = run([1.0, 0.0], [0, 0], eps=1.0 - 0.5**0.5)
    assert adv == pytest.approx([0.5, -0.5], abs=1e-6)
