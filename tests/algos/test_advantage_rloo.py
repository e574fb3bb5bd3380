"""rloo: leave-one-out baseline, r_i - mean of the others = n/(n-1) (r_i - mean)."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs

REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
# group 0: 1,0,0,1: a 1 against the others (0,0,1) mean 1/3 -> 2/3; a 0 against (1,0,1) mean 2/3 -> -2/3
# group 1: 1,1,1,1: 1 - 1 = 0 exactly
# group 2: 0,0,0,1: a 0 against (0,0,1) -> -1/3; the 1 against (0,0,0) -> 1
EXPECTED = [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0.0, 0.0, 0.0, 0.0, -1 / 3, -1 / 3, -1 / 3, 1.0]


def run(rewards: list[float], groups: list[int]):
    n = len(rewards)
    return get_estimator("rloo").fn(
        AdvantageInputs(torch.tensor(rewards), torch.tensor(groups), torch.ones(n, 1, dtype=torch.bool))
    )


def test_hand_computed_example() -> None:
    out = run(REWARDS, GROUPS)
    assert out.advantages.tolist() == pytest.approx(EXPECTED, abs=1e-6)
    assert torch.equal(out.advantages[4:8], torch.zeros(4))
    assert out.metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)


def test_interleaved_unequal_groups() -> None:
    # group 3 (size 2): 4, 1 -> 4 - 1 = 3, 1 - 4 = -3
    # group 7 (size 3): 3, 0, 0 -> 3 - 0 = 3; 0 - (3 + 0)/2 = -1.5 (twice)
    # group 0 (size 2): 0.3, 0.3 -> exactly 0
    out = run([4.0, 3.0, 0.3, 0.0, 1.0, 0.0, 0.3], [3, 7, 0, 7, 3, 7, 0])
    assert out.advantages.tolist() == pytest.approx([3.0, 3.0, 0.0, -1.5, -3.0, -1.5, 0.0], abs=1e-6)
    assert out.advantages[2] == 0.0 and out.advantages[6] == 0.0


def test_group_of_one_raises() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        run([1.0, 0.0, 1.0], [0, 0, 1])
