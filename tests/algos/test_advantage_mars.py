"""mars: per-(group, agent) standardized results returned to each player's turns, by hand."""

from __future__ import annotations

import pytest
import torch

from reference.mars_reinforce_return import compute_reinforce_return
from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs


def _layout(counts: list[int], width: int = 8) -> torch.Tensor:
    """Token positions of each row: a prompt token, then each turn as two tokens after an observation."""
    rows = []
    for n in counts:
        row = [-1]
        for k in range(n):
            row += [k, k, -1]
        rows.append(row + [-1] * (width - len(row)))
    return torch.tensor(rows)


def test_mars_by_hand() -> None:
    # One game group: X, O, X, O (two games), results X +1 / O -1, then X -1 / O +1; gamma 0.5.
    # X's results [1, -1]: mean 0, unbiased std sqrt(2): R~ = [+0.70711, -0.70711]; O's the mirror.
    # Row 3 (O, 2 turns) also has a turn reward 0.2 on its first turn: 0.2 / sqrt(2) = 0.14142.
    #   row 0 (X, 2 turns): [0.5 * 0.70711, 0.70711]            = [0.35355, 0.70711]
    #   row 1 (O, 1 turn):  [-0.70711]
    #   row 2 (X, 1 turn):  [-0.70711]
    #   row 3 (O, 2 turns): [0.14142 + 0.5 * 0.70711, 0.70711]  = [0.49497, 0.70711]
    # A second group whose results are all equal gets exactly 0.
    counts = [2, 1, 1, 2, 1, 1]
    turn_index = _layout(counts)
    turn_rewards = torch.zeros(6, 2, dtype=torch.float64)
    turn_rewards[3, 0] = 0.2
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, -1.0, -1.0, 1.0, 0.0, 0.0], dtype=torch.float64),
        group_ids=torch.tensor([0, 0, 0, 0, 1, 1]),
        mask=turn_index >= 0,
        turn_index=turn_index,
        turn_rewards=turn_rewards,
        turn_counts=torch.tensor(counts),
        agent_ids=torch.tensor([0, 1, 0, 1, 0, 0]),
        gamma=0.5,  # eps stays at its 1e-6: a constant group's 0 / (0 + eps) is exactly 0
    )
    out = get_estimator("mars").fn(inputs)
    expected = [[0.353553, 0.707107], [-0.707107], [-0.707107], [0.494975, 0.707107], [0.0], [0.0]]
    assert out.advantages.shape == turn_index.shape
    for row, turns in enumerate(expected):
        for t in range(turn_index.shape[1]):
            k = int(turn_index[row, t])
            assert out.advantages[row, t].item() == pytest.approx(turns[k] if k >= 0 else 0.0, abs=1e-5), (row, t)
    assert out.metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)  # (group 1, X) of 3 (group, agent) pairs


def test_mars_without_discount_or_turn_rewards_is_dr_mas_on_every_turn() -> None:
    counts = [3, 1, 2, 2]
    turn_index = _layout(counts, width=10)
    common = dict(
        rewards=torch.tensor([1.0, 0.0, 0.5, -1.0], dtype=torch.float64),
        group_ids=torch.tensor([0, 0, 0, 0]),
        mask=turn_index >= 0,
        agent_ids=torch.tensor([0, 0, 1, 1]),
    )
    mars = get_estimator("mars").fn(AdvantageInputs(**common, turn_index=turn_index, turn_counts=torch.tensor(counts))).advantages
    dr_mas = get_estimator("dr_mas").fn(AdvantageInputs(**common)).advantages
    expected = torch.where(turn_index >= 0, dr_mas[:, None].expand_as(mars), torch.zeros_like(mars))
    assert torch.allclose(mars, expected)


def test_mars_refuses_a_lone_sample_of_an_agent_and_single_turn_data() -> None:
    turn_index = _layout([1, 1])
    with pytest.raises(ValueError, match="at least 2 samples per group"):
        get_estimator("mars").fn(AdvantageInputs(
            rewards=torch.tensor([1.0, -1.0]), group_ids=torch.tensor([0, 0]), mask=turn_index >= 0,
            turn_index=turn_index, turn_counts=torch.tensor([1, 1]), agent_ids=torch.tensor([0, 1]),
        ))
    with pytest.raises(ValueError, match="turn_index"):
        get_estimator("mars").fn(AdvantageInputs(rewards=torch.tensor([1.0, -1.0]), group_ids=torch.tensor([0, 0]), mask=turn_index >= 0))


def test_a_game_run_with_mars_needs_two_games_per_group() -> None:
    from pathlib import Path

    from reinforge.config import ConfigError, load_config
    from reinforge.run.preflight import preflight

    recipe = str(Path(__file__).parents[2] / "recipes" / "tictactoe-selfplay.yaml")
    preflight(load_config(recipe, ["algo.advantage=mars"]))  # the recipe's groups hold 4 to 8 games
    with pytest.raises(ConfigError, match="algo.advantage=mars normalizes each role within its group"):
        preflight(load_config(recipe, ["algo.advantage=mars", "rollout.group_size=2"]))


def _two_games(discount: str, gamma: float = 0.5):
    # One group, one player (no agent ids) of two games: X wins (+1) in 2 turns, X loses (-1) in 1 turn.
    # Normalized results: mean 0, std sqrt(2): R~ = +-0.70711. Layout (width 8, _layout):
    #   row 0: [-1, 0, 0, -1, 1, 1, -1, -1]   turn 0 ends at t=2, turn 1 at t=5
    #   row 1: [-1, 0, 0, -1, -1, ...]        turn 0 ends at t=2
    counts = [2, 1]
    turn_index = _layout(counts)
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, -1.0], dtype=torch.float64), group_ids=torch.tensor([0, 0]), mask=turn_index >= 0,
        turn_index=turn_index, turn_counts=torch.tensor(counts), gamma=gamma, mars_discount=discount,
    )
    return get_estimator("mars").fn(inputs).advantages, turn_index


def test_mars_turn_and_token_discounts_by_hand() -> None:
    r = 2**-0.5
    # turn (the paper): row 0's turn 1 gets R~, turn 0 gets 0.5 R~, every token of a turn the same.
    turn, _ = _two_games("turn")
    assert turn[0].tolist() == pytest.approx([0, 0.5 * r, 0.5 * r, 0, r, r, 0, 0], abs=1e-6)
    # token (the authors' code): R~ sits on t=5 and is discounted per position:
    #   t=5: R~, t=4: 0.5 R~, t=2: 0.125 R~, t=1: 0.0625 R~ (t=3, an observation, is not trained).
    token, _ = _two_games("token")
    assert token[0].tolist() == pytest.approx([0, 0.0625 * r, 0.125 * r, 0, 0.5 * r, r, 0, 0], abs=1e-6)
    assert token[1].tolist() == pytest.approx([0, -0.5 * r, -r, 0, 0, 0, 0, 0], abs=1e-6)
    # gamma 1: the two are the same.
    assert torch.equal(_two_games("turn", 1.0)[0], _two_games("token", 1.0)[0])


@pytest.mark.parametrize("seed", range(6))
def test_mars_token_discount_is_the_authors_reinforce_return(seed: int) -> None:
    """Random games (ragged turn counts, turn rewards, two players, a constant (group, agent)):
    the authors' compute_reinforce_return on the normalized scores at each turn's last token."""
    g = torch.Generator().manual_seed(seed)
    n, width, gamma = 8, 20, 0.9
    counts = torch.randint(1, 5, (n,), generator=g)
    turn_index = _layout(counts.tolist(), width=width)
    agents = torch.tensor([0, 1] * (n // 2))
    rewards = torch.randint(-1, 2, (n,), generator=g).double()
    rewards[[1, 3]] = 0.5  # agent 1 of group 0 (rows 1, 3) has equal results: R~ = 0, turn rewards unscaled
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    turn_rewards = torch.rand(n, 4, generator=g, dtype=torch.float64) * (torch.arange(4)[None] < counts[:, None])
    inputs = AdvantageInputs(
        rewards=rewards, group_ids=groups, mask=turn_index >= 0, turn_index=turn_index, turn_rewards=turn_rewards,
        turn_counts=counts, agent_ids=agents, gamma=gamma, mars_discount="token",
    )
    ours = get_estimator("mars").fn(inputs).advantages.double()

    # The authors' pipeline: scores normalized per (group, player), turn scores on each turn's end token.
    expected_scores = torch.zeros(n, width, dtype=torch.float64)
    for i in range(n):
        peers = (groups == groups[i]) & (agents == agents[i])
        std = rewards[peers].std()
        constant = bool((rewards[peers] == rewards[i]).all())
        outcome = 0.0 if constant else float((rewards[i] - rewards[peers].mean()) / (std + 1e-6))
        scale = 1.0 if constant else float(std + 1e-6)
        for k in range(int(counts[i])):
            end = int((turn_index[i] == k).nonzero().max())
            expected_scores[i, end] = turn_rewards[i, k] / scale + (outcome if k == counts[i] - 1 else 0.0)
    expected, _ = compute_reinforce_return(expected_scores, gamma, 1.0)
    trained = turn_index >= 0
    assert torch.allclose(ours[trained], expected[trained], atol=1e-5)
    assert torch.equal(ours[~trained], torch.zeros(int((~trained).sum()), dtype=torch.float64))
