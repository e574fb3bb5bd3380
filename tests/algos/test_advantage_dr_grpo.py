"""dr_grpo: group-mean baseline, no std division."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs

REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
# group 0: 1,0,0,1 mean 0.5  -> +0.5, -0.5, -0.5, +0.5
# group 1: 1,1,1,1 zero variance -> 0 exactly
# group 2: 0,0,0,1 mean 0.25 -> -0.25, -0.25, -0.25, 0.75
EXPECTED = [0.5, -0.5, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0, -0.25, -0.25, -0.25, 0.75]


def run(rewards: list[float], groups: list[int]):
    n = len(rewards)
    return get_estimator("dr_grpo").fn(
        AdvantageInputs(torch.tensor(rewards), torch.tensor(groups), torch.ones(n, 1, dtype=torch.bool))
    )


def test_hand_computed_example() -> None:
    out = run(REWARDS, GROUPS)
    assert out.advantages.tolist() == pytest.approx(EXPECTED, abs=1e-7)
    assert torch.equal(out.advantages[4:8], torch.zeros(4))
    assert out.metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)
    # |A| summed: 4 * 0.5 + 3 * 0.25 + 0.75 = 3.5, over 12 samples
    assert out.metrics["advantage_abs_mean"] == pytest.approx(3.5 / 12)


def test_interleaved_group_ids() -> None:
    perm = [11, 4, 0, 9, 2, 6, 1, 10, 5, 3, 8, 7]
    out = run([REWARDS[i] for i in perm], [[30, -1, 8][GROUPS[i]] for i in perm])
    assert out.advantages.tolist() == pytest.approx([EXPECTED[i] for i in perm], abs=1e-7)


def test_scale_is_kept() -> None:
    # Unlike grpo the reward scale survives: rewards 10, 0 -> +5, -5; constant 0.3 x3 -> exactly 0.
    out = run([10.0, 0.0, 0.3, 0.3, 0.3], [0, 0, 1, 1, 1])
    assert out.advantages.tolist()[:2] == pytest.approx([5.0, -5.0])
    assert torch.equal(out.advantages[2:], torch.zeros(3))


def test_group_of_one_raises() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        run([1.0, 0.0, 1.0], [0, 0, 1])
