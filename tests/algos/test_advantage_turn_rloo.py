"""turn_rloo: discounted turn returns and the turn-level leave-one-out baseline, by hand."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.advantages.turn_rloo import turn_returns
from reinforge.algos.types import AdvantageInputs


def test_turn_returns_by_hand() -> None:
    # episode 0: turns [0.2, 0] + outcome 1 on its last turn; gamma 0.5
    returns = turn_returns(torch.tensor([[0.2, 0.0, 0.0], [0.0, 0.0, 0.0]]), torch.tensor([2, 1]), torch.tensor([1.0, 0.0]), 0.5)
    assert torch.allclose(returns, torch.tensor([[0.7, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64))


def test_turn_level_advantages_by_hand() -> None:
    # One group of three episodes with 2, 1 and 3 policy turns; gamma = 0.5.
    #   E0: R = [0.2, 1]       G = [0.7, 1]
    #   E1: R = [0]            G = [0]
    #   E2: R = [0.2, 0.2, 1]  G = [0.55, 0.7, 1]
    # held at the last turn: E0 [0.7, 1, 1], E1 [0, 0, 0], E2 [0.55, 0.7, 1]
    # baselines (mean of the other two): E0 [0.275, 0.35], E1 [0.625], E2 [0.35, 0.5, 0.5]
    expected_turn_adv = [[0.425, 0.65], [-0.625], [0.2, 0.2, 0.5]]
    # token layout, 8 positions each: -1 = not a policy token (prompt, observation, padding)
    turn_index = torch.tensor(
        [
            [-1, 0, 0, -1, 1, 1, -1, -1],
            [-1, -1, 0, 0, 0, -1, -1, -1],
            [-1, 0, -1, 1, 1, -1, 2, -1],
        ]
    )
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64),
        group_ids=torch.tensor([0, 0, 0]),
        mask=turn_index >= 0,
        turn_index=turn_index,
        turn_rewards=torch.tensor([[0.2, 0.0, 0.0], [0.0, 0.0, 0.0], [0.2, 0.2, 0.0]], dtype=torch.float64),
        turn_counts=torch.tensor([2, 1, 3]),
        gamma=0.5,
    )
    out = get_estimator("turn_rloo").fn(inputs)
    adv = out.advantages
    assert adv.shape == (3, 8)
    for row, turns in enumerate(expected_turn_adv):
        for t in range(8):
            k = int(turn_index[row, t])
            assert adv[row, t].item() == pytest.approx(turns[k] if k >= 0 else 0.0, abs=1e-6), (row, t)


def test_single_turn_without_turn_rewards_equals_rloo() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.25], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    mask = torch.tensor([[False, True, True]] * 6)
    turn_index = torch.where(mask, 0, -1)
    turn = get_estimator("turn_rloo").fn(
        AdvantageInputs(rewards=rewards, group_ids=groups, mask=mask, turn_index=turn_index, turn_counts=torch.ones(6, dtype=torch.long))
    )
    rloo = get_estimator("rloo").fn(AdvantageInputs(rewards=rewards, group_ids=groups, mask=mask))
    assert torch.allclose(turn.advantages[:, 1], rloo.advantages.float(), atol=1e-6)
    assert (turn.advantages[:, 0] == 0).all()


def test_group_of_one_and_missing_turn_data_are_errors() -> None:
    mask = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="turn_index"):
        get_estimator("turn_rloo").fn(AdvantageInputs(rewards=torch.zeros(2), group_ids=torch.tensor([0, 1]), mask=mask))
    with pytest.raises(ValueError, match="at least 2 episodes"):
        get_estimator("turn_rloo").fn(
            AdvantageInputs(
                rewards=torch.zeros(2), group_ids=torch.tensor([0, 1]), mask=mask,
                turn_index=torch.zeros(2, 3, dtype=torch.long), turn_counts=torch.ones(2, dtype=torch.long),
            )
        )
