"""SPA turn progress: increments that sum to the outcome (hand-computed), how they reach turn_rloo,
and an estimator that learns to make its contributions add up to the outcomes."""

from __future__ import annotations

import random

import pytest
import torch

from reinforge.algos.advantages.turn_rloo import turn_returns
from reinforge.config import ProgressConfig
from reinforge.rollout.trajectory import Trajectory
from reinforge.values.turn_progress import TurnProgress, progress_turn_rewards, redistributed_increments, turn_token_spans


def episode(turns: list[list[int]], observations: list[list[int]], reward: float, env_rewards=None) -> Trajectory:
    ids, spans, mask = [1, 2], [], [False, False]
    for turn, obs in zip(turns, observations):
        spans.append((len(ids), len(ids) + len(turn)))
        ids += turn + obs
        mask += [True] * len(turn) + [False] * len(obs)
    t = Trajectory("t", 0, ids, mask, [0.0] * len(ids), spans, 2, "", 0, "stop", turn_rewards=env_rewards)
    t.reward = reward
    return t


def test_increments_sum_to_the_outcome_by_hand() -> None:
    # residual (1 - (0.2 + 0.5 - 0.1)) / 3 = 0.4 / 3 added to each turn
    r = redistributed_increments([0.2, 0.5, -0.1], 1.0)
    assert r == pytest.approx([0.2 + 0.4 / 3, 0.5 + 0.4 / 3, -0.1 + 0.4 / 3])
    assert sum(r) == pytest.approx(1.0)
    assert redistributed_increments([0.0, 0.0], 0.0) == [0.0, 0.0]
    with pytest.raises(ValueError, match="at least one turn"):
        redistributed_increments([], 1.0)


def test_turn_rloo_sees_the_increments_as_its_per_turn_rewards() -> None:
    t = episode([[5], [6], [7]], [[9], [9], []], reward=1.0, env_rewards=[0.0, 0.5, 0.0])
    increments = redistributed_increments([0.2, 0.5, -0.1], t.reward)
    shaped = progress_turn_rewards(t, increments)
    assert shaped == pytest.approx([increments[0], 0.5 + increments[1], increments[2] - 1.0])
    # turn_rloo: R_{i,k} = turn reward + [last] outcome  ->  increments (+ the env's own turn rewards)
    returns = turn_returns(torch.tensor([shaped]), torch.tensor([3]), torch.tensor([1.0]), gamma=1.0)
    assert returns[0].tolist() == pytest.approx([1.5, 1.5 - increments[0], increments[2]])
    # episode-level estimators add the turn rewards' sum: progress adds exactly nothing there.
    assert sum(shaped) - 0.5 == pytest.approx(0.0)


def test_turn_spans_take_the_observation_after_each_turn() -> None:
    t = episode([[5, 5], [6]], [[9, 9, 9], []], reward=0.0)
    assert turn_token_spans(t) == [(2, 7), (7, 8)]


def test_the_estimator_learns_contributions_that_add_up_to_the_outcome() -> None:
    rng = random.Random(0)

    def batch(n: int) -> list[Trajectory]:
        out = []
        for _ in range(n):
            good = rng.random() < 0.5  # the outcome is decided by what the second turn did
            out.append(episode([[5, 6], [7 if good else 8]], [[9], []], reward=float(good)))
        return out

    progress = TurnProgress(ProgressConfig(enabled=True, train_steps=40, lr=0.02), vocab_size=16, seed=0)
    first = progress.assign(batch(32))["progress/sum_gap"]
    for _ in range(4):
        progress.assign(batch(32))
    trajectories = batch(32)
    last = progress.assign(trajectories)["progress/sum_gap"]
    assert last < 0.1 < first
    for t in trajectories:  # rewards handed on always sum to the outcome (less it, on the last turn)
        assert sum(t.turn_rewards) == pytest.approx(0.0, abs=1e-6)
    resumed = TurnProgress(ProgressConfig(enabled=True, train_steps=40, lr=0.02), vocab_size=16, seed=3)
    resumed.load_state_dict(progress.state_dict())
    a, b = batch(16), None
    b = [episode([[5, 6], [x.token_ids[-1]]], [[9], []], x.reward) for x in a]
    assert progress.assign(a) == resumed.assign(b)
