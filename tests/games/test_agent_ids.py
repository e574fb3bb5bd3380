"""Trajectories' agents reach the estimator as indices; single-agent batches carry none."""

from __future__ import annotations

from reinforge.rollout.trajectory import single_turn_trajectory
from reinforge.trainer.advantage_step import agent_ids


def trajectory(agent):
    t = single_turn_trajectory("t", [1, 2], [3], [-0.1], "3")
    t.agent = agent
    return t


def test_agents_become_indices_in_order_of_first_appearance() -> None:
    assert agent_ids([trajectory("O"), trajectory("X"), trajectory("O")]).tolist() == [0, 1, 0]
    assert agent_ids([trajectory(None), trajectory(None)]) is None
