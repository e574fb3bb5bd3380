from __future__ import annotations

import pytest

from reinforge.rewards.shaping import OverlongPenalty
from reinforge.rollout.trajectory import Trajectory, single_turn_trajectory
from reinforge.tasks.task import Task

TASK = Task(id="t", prompt="p", answer="a")


def trajectory(sampled: int, finish: str = "stop") -> Trajectory:
    return single_turn_trajectory("t", [1, 1], [1] * sampled, [0.0] * sampled, "x", finish)


def test_soft_overlong_penalty_by_hand():
    # L_max = 10, L_cache = 4: free up to 6 tokens, then -1/4 per token, -1 past 10.
    penalty = OverlongPenalty(max_tokens=10, cache_tokens=4)
    assert penalty(TASK, trajectory(6)) == 0.0
    assert penalty(TASK, trajectory(7)) == -0.25
    assert penalty(TASK, trajectory(9)) == -0.75
    assert penalty(TASK, trajectory(10)) == -1.0
    assert penalty(TASK, trajectory(11)) == -1.0
    assert penalty(TASK, trajectory(5, finish="length")) == -1.0


def test_bad_overlong_parameters_are_refused():
    with pytest.raises(ValueError, match="cache_tokens"):
        OverlongPenalty(max_tokens=4, cache_tokens=8)
