from __future__ import annotations

import pytest

from reinforge.rewards.builtin import build_reward_fn
from reinforge.rewards.shaping import (
    LengthPenalty,
    clip_process_rewards,
    delta_process_rewards,
    gated_step_rewards,
    potential_based_shaping,
)
from reinforge.rollout.trajectory import Trajectory, single_turn_trajectory
from reinforge.tasks.task import Task

TASK = Task(id="t", prompt="p", answer="a")


def trajectory(sampled: int) -> Trajectory:
    return single_turn_trajectory("t", [1, 1], [1] * sampled, [0.0] * sampled, "x")


def test_length_penalty_by_hand():
    penalty = LengthPenalty(target_tokens=5, per_token=0.5)
    assert penalty(TASK, trajectory(3)) == 0.0
    assert penalty(TASK, trajectory(5)) == 0.0
    assert penalty(TASK, trajectory(8)) == -1.5
    assert isinstance(build_reward_fn("length", {"target_tokens": 5, "per_token": 0.5}), LengthPenalty)
    with pytest.raises(ValueError, match="per_token"):
        LengthPenalty(target_tokens=5, per_token=-1.0)


def test_clip_bounds_every_step_and_the_sum():
    assert clip_process_rewards([0.7, 0.2, -0.4, 0.8], upper=0.0) == [0.0, 0.0, -0.4, 0.0]
    assert clip_process_rewards([0.7, -0.5], upper=-0.25) == [-0.25, -0.5]
    # Gao et al.'s min(PRM - eta, 0) with eta = 0.5: shift, then clip at 0.
    assert clip_process_rewards([r - 0.5 for r in [0.75, 0.25]], upper=0.0) == [0.0, -0.25]
    # Repeating steps can never raise the total above 0.
    assert sum(clip_process_rewards([0.9] * 50)) == 0.0
    with pytest.raises(ValueError, match="upper <= 0"):
        clip_process_rewards([0.1], upper=0.5)


def test_delta_telescopes_to_first_minus_last():
    rewards = [0.75, 0.25, 0.5, 1.0]
    assert delta_process_rewards(rewards) == [0.5, -0.25, -0.5, 0.0]
    assert sum(delta_process_rewards(rewards)) == rewards[0] - rewards[-1]
    assert delta_process_rewards([0.3]) == [0.0]
    assert delta_process_rewards([]) == []


def test_potential_based_shaping_by_hand():
    potentials = [1.0, 3.0, 2.0, 6.0]
    assert potential_based_shaping(potentials, gamma=1.0) == [2.0, -1.0, 4.0]
    assert sum(potential_based_shaping(potentials, gamma=1.0)) == potentials[-1] - potentials[0]
    # gamma = 0.5: F_t = 0.5 Phi_{t+1} - Phi_t, and sum_t gamma^t F_t = gamma^T Phi_T - Phi_0.
    shaped = potential_based_shaping(potentials, gamma=0.5)
    assert shaped == [0.5, -2.0, 1.0]
    assert sum(0.5**t * f for t, f in enumerate(shaped)) == 0.5**3 * 6.0 - 1.0
    with pytest.raises(ValueError, match="gamma"):
        potential_based_shaping(potentials, gamma=1.5)


def test_gated_step_rewards_count_only_on_success():
    steps = [0.5, 0.25, 1.0]
    assert gated_step_rewards(steps, outcome=1.0, threshold=1.0) == steps
    assert gated_step_rewards(steps, outcome=0.0, threshold=1.0) == [0.0, 0.0, 0.0]
    assert gated_step_rewards(steps, outcome=0.6, threshold=0.5) == steps
