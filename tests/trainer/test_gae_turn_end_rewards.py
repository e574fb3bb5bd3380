"""gae with per-turn rewards (SPA-RL's PPO on stepwise progress rewards): each turn's reward is paid
at its last sampled token, not summed into the episode's reward, so the critic learns per-turn
returns. Hand-computed through prepare_batch, and where a turn's reward goes when its tokens are masked."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.config import load_config
from reinforge.rollout.trajectory import Trajectory
from reinforge.trainer.advantage_step import prepare_batch
from reinforge.trainer.turn_credit import turn_end_token_rewards, turn_layout
from reinforge.values.turn_progress import progress_turn_rewards

# Tokens 0-1 prompt, 2-4 the policy's turn 0, 5-6 the tool's observation, 7-8 the policy's turn 1.
# Position t of the [N, T-1] batch predicts token t+1: turn 0 trains at positions 1, 2, 3, turn 1 at 6, 7.
SPANS = [(2, 5), (7, 9)]
SAMPLED = [1, 2, 3, 6, 7]
VALUES = {1: 0.2, 2: 0.25, 3: 0.3, 6: 0.5, 7: 0.6}


def episode(turn_rewards: list[float], outcome: float) -> Trajectory:
    mask = [any(a <= i < b for a, b in SPANS) for i in range(9)]
    return Trajectory(
        "t", 0, list(range(10, 19)), mask, [-0.5 if m else 0.0 for m in mask], SPANS, 2, "", 0, "stop",
        rewards={"correct": outcome}, reward=outcome, turn_rewards=turn_rewards,
    )


class FixedCritic:
    """V(s_t) as given: the advantage math alone, without a value model."""

    def values(self, batch) -> torch.Tensor:
        v = torch.zeros(batch.loss_mask.shape)
        for t, value in VALUES.items():
            v[0, t] = value
        return v * batch.loss_mask


def test_progress_rewards_reach_gae_at_each_turn_end_by_hand() -> None:
    # SPA: outcome R = 1, increments 0.3 and 0.7; the turn rewards carry the increments with R taken
    # off the last turn (gae adds R back at the row's last sampled token): rewards 0.3 at position 3
    # (turn 0's end), 0.7 - 1 + 1 = 0.7 at position 7. gamma 0.9, lam 0.5 (gamma lam = 0.45), V as above:
    #   delta(7) = 0.7 - 0.6 = 0.1                 A(7) = 0.1
    #   delta(6) = 0.9 * 0.6 - 0.5 = 0.04          A(6) = 0.04 + 0.45 * 0.1 = 0.085
    #   delta(3) = 0.3 + 0.9 * 0.5 - 0.3 = 0.45    A(3) = 0.45 + 0.45 * 0.085 = 0.48825
    #   delta(2) = 0.9 * 0.3 - 0.25 = 0.02         A(2) = 0.02 + 0.45 * 0.48825 = 0.2397125
    #   delta(1) = 0.9 * 0.25 - 0.2 = 0.025        A(1) = 0.025 + 0.45 * 0.2397125 = 0.132870625
    #   returns = A + V: 0.332870625, 0.4897125, 0.78825 | 0.585, 0.7
    t = episode(progress_turn_rewards(episode(None, 1.0), [0.3, 0.7]), 1.0)
    assert t.turn_rewards == pytest.approx([0.3, -0.3])
    algo = load_config("default", ["algo.advantage=gae", "algo.gamma=0.9", "algo.lam=0.5"]).algo
    batch, metrics = prepare_batch([t], algo, get_estimator("gae"), {"correct": 1.0}, 0, None, None, FixedCritic())
    returns = [0.332870625, 0.4897125, 0.78825, 0.585, 0.7]
    assert batch.returns[0, SAMPLED].tolist() == pytest.approx(returns, abs=1e-6)
    assert metrics["advantage_raw_mean"] == pytest.approx(sum(r - VALUES[p] for r, p in zip(returns, SAMPLED)) / 5, abs=1e-6)


def test_gae_returns_differ_from_the_outcome_only_credit() -> None:
    # The same episode without its per-turn rewards: the return at turn 0's end is only the
    # bootstrapped future, 0.9 * 0.5 + 0.45 * A(6); with them it is 0.3 more than that (hand math above).
    algo = load_config("default", ["algo.advantage=gae", "algo.gamma=0.9", "algo.lam=0.5"]).algo
    with_turns, _ = prepare_batch([episode([0.3, -0.3], 1.0)], algo, get_estimator("gae"), {"correct": 1.0}, 0, None, None, FixedCritic())
    outcome_only, _ = prepare_batch([episode(None, 1.0)], algo, get_estimator("gae"), {"correct": 1.0}, 0, None, None, FixedCritic())
    # outcome only: delta(7) = 1 - 0.6 = 0.4, A(6) = 0.04 + 0.45 * 0.4 = 0.22, A(3) = 0.9 * 0.5 - 0.3 + 0.45 * 0.22 = 0.249
    assert outcome_only.returns[0, 3].item() == pytest.approx(0.249 + 0.3, abs=1e-6)
    assert with_turns.returns[0, 3].item() == pytest.approx(0.78825, abs=1e-6)


def test_a_masked_turn_end_pays_at_the_next_sampled_token() -> None:
    t = episode([0.3, -0.3], 1.0)
    layout = turn_layout([t], 8, load_config("default", []).algo)
    mask = torch.zeros(1, 8, dtype=torch.bool)
    mask[0, SAMPLED] = True
    placed = turn_end_token_rewards(layout, mask)
    assert placed[0].tolist() == pytest.approx([0, 0, 0, 0.3, 0, 0, 0, -0.3])
    mask[0, 3] = False  # turn 0's last token left the loss (rollout correction): its last sampled one pays
    assert turn_end_token_rewards(layout, mask)[0].tolist() == pytest.approx([0, 0, 0.3, 0, 0, 0, 0, -0.3])
    mask[0, [1, 2]] = False  # none of turn 0 left: the next step the agent takes (turn 1's first token)
    assert turn_end_token_rewards(layout, mask)[0].tolist() == pytest.approx([0, 0, 0, 0, 0, 0, 0.3, -0.3])
    mask[0, [6, 7]] = False  # a row out of the loss trains nothing
    assert not turn_end_token_rewards(layout, mask).any()
