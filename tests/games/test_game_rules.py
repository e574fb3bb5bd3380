"""Rules of the built-in games: legal moves, terminal states, winners, payoffs; the fixed players."""

from __future__ import annotations

import itertools
import random

import pytest

from reinforge.games.connect_four import ConnectFour
from reinforge.games.kuhn_poker import KuhnPoker
from reinforge.games.opponents import check_opponent, kuhn_bet_probability, minimax, random_legal
from reinforge.games.tictactoe import TicTacToe


def play(game, moves, state=None):
    state = game.initial_state(random.Random(0)) if state is None else state
    for move in moves:
        assert move in game.legal_moves(state), (move, state)
        state = game.play(state, move)
    return state


def test_tictactoe_moves_turns_and_board() -> None:
    game = TicTacToe()
    start = game.initial_state(random.Random(0))
    assert game.legal_moves(start) == [str(i) for i in range(1, 10)] and game.to_move(start) == 0
    state = play(game, ["5", "1"])
    assert state == "O...X...." and game.to_move(state) == 0
    assert game.legal_moves(state) == ["2", "3", "4", "6", "7", "8", "9"]
    assert game.board(state) == "O23/4X6/789"
    with pytest.raises(ValueError):
        game.play(state, "5")


@pytest.mark.parametrize(
    "moves, payoffs",
    [
        (["1", "4", "2", "5", "3"], (1.0, -1.0)),  # X: top row
        (["1", "3", "2", "5", "9", "7"], (-1.0, 1.0)),  # O: anti-diagonal
        (["5", "1", "9", "3", "2", "8", "4", "6", "7"], (0.0, 0.0)),  # full board, no line: draw
        (["3", "1", "5", "2", "7"], (1.0, -1.0)),  # X: anti-diagonal on the last move
    ],
)
def test_tictactoe_terminal_states(moves, payoffs) -> None:
    game = TicTacToe()
    state = play(game, moves)
    assert game.is_over(state) and game.payoffs(state) == payoffs and game.legal_moves(state) == []
    assert not game.is_over(play(game, moves[:-1]))


def test_minimax_takes_a_win_blocks_a_loss_and_never_loses() -> None:
    game, rng = TicTacToe(), random.Random(0)
    assert minimax(game, play(game, ["1", "4", "2", "5"]), 0, rng) == "3"  # X wins at once
    assert minimax(game, play(game, ["1", "5", "2"]), 1, rng) == "3"  # O must block
    for seed in range(30):  # against a random player, in either seat, it never loses
        rng = random.Random(seed)
        for perfect_seat in (0, 1):
            state = game.initial_state(rng)
            while not game.is_over(state):
                seat = game.to_move(state)
                state = game.play(state, (minimax if seat == perfect_seat else random_legal)(game, state, seat, rng))
            assert game.payoffs(state)[perfect_seat] >= 0
    state = game.initial_state(rng)  # two perfect players draw
    while not game.is_over(state):
        state = game.play(state, minimax(game, state, game.to_move(state), rng))
    assert game.payoffs(state) == (0.0, 0.0)


def test_connect_four_drops_and_lines() -> None:
    game = ConnectFour()
    state = play(game, ["4", "4", "4"])
    assert game.board(state).split("/")[-3:] == ["...X...", "...O...", "...X..."]
    vertical = play(game, ["1", "2", "1", "2", "1", "2", "1"])
    assert game.is_over(vertical) and game.payoffs(vertical) == (1.0, -1.0)
    second_wins = play(game, ["1", "2", "1", "2", "1", "2", "3", "2"])  # O: column 2
    assert game.is_over(second_wins) and game.payoffs(second_wins) == (-1.0, 1.0)
    assert not game.is_over(play(game, ["1", "2", "1", "2", "1", "2", "3"]))
    diagonal = play(game, ["1", "2", "2", "3", "3", "4", "3", "4", "4", "7", "4"])  # X: 1/1, 2/2, 3/3, 4/4
    assert game.is_over(diagonal) and game.payoffs(diagonal) == (1.0, -1.0)
    bottom_row = play(game, ["1", "1", "2", "2", "3", "3", "4"])
    assert game.is_over(bottom_row) and game.payoffs(bottom_row) == (1.0, -1.0)
    full_column = play(game, ["5", "5", "5", "5", "5", "5"])
    assert "5" not in game.legal_moves(full_column) and len(game.legal_moves(full_column)) == 6
    with pytest.raises(ValueError):
        game.play(full_column, "5")


def test_connect_four_full_board_is_a_draw() -> None:
    game = ConnectFour()
    # Columns filled in pairs 1-2, 3-4, 5-6 with the order flipped every row pair, then column 7:
    # no four in a line anywhere (checked by the game itself), 42 moves.
    order = []
    for a, b in (("1", "2"), ("3", "4"), ("5", "6")):
        order += [a, b, a, b, b, a, b, a, a, b, a, b]
    order += ["7"] * 6
    state = game.initial_state(random.Random(0))
    for move in order:
        state = game.play(state, move)
    assert "." not in state and game.is_over(state) and game.payoffs(state) == (0.0, 0.0)


@pytest.mark.parametrize(
    "cards, history, payoffs",
    [
        ("KJ", "pp", (1.0, -1.0)), ("JK", "pp", (-1.0, 1.0)),
        ("QJ", "bb", (2.0, -2.0)), ("QK", "pbb", (-2.0, 2.0)),
        ("JQ", "bp", (1.0, -1.0)),  # the second folds: the first wins the ante, whatever the cards
        ("KJ", "pbp", (-1.0, 1.0)),  # the first folds
    ],
)
def test_kuhn_payoffs(cards, history, payoffs) -> None:
    game = KuhnPoker()
    state = (cards[0], cards[1], "")
    for action in history:
        assert not game.is_over(state) and game.to_move(state) == len(state[2]) % 2
        state = game.play(state, {"p": "pass", "b": "bet"}[action])
    assert game.is_over(state) and game.payoffs(state) == payoffs and game.legal_moves(state) == []


def test_kuhn_deals_two_different_cards_and_views_hide_the_other() -> None:
    game = KuhnPoker()
    for seed in range(20):
        first, second, history = game.initial_state(random.Random(seed))
        assert first != second and history == ""
        assert game.view((first, second, ""), 0) == f"Your card {first}. Your move:"
        assert second not in game.view((first, second, ""), 0).replace("Your", "")


def test_kuhn_equilibrium_is_worth_minus_one_eighteenth_to_the_first_player() -> None:
    """Exact expectation over the 6 deals and both players' mixed actions (Kuhn 1950: -1/18)."""
    game = KuhnPoker()

    def value(state) -> float:
        if game.is_over(state):
            return game.payoffs(state)[0]
        bet = kuhn_bet_probability(state[game.to_move(state)], state[2])
        return bet * value(game.play(state, "bet")) + (1 - bet) * value(game.play(state, "pass"))

    deals = list(itertools.permutations("JQK", 2))
    assert sum(value((a, b, "")) for a, b in deals) / len(deals) == pytest.approx(-1 / 18, abs=1e-12)


def test_opponents_refuse_games_they_cannot_play() -> None:
    check_opponent("minimax", TicTacToe())
    for name, game in (("minimax", ConnectFour()), ("minimax", KuhnPoker()), ("kuhn_equilibrium", TicTacToe()), ("alphazero", TicTacToe())):
        with pytest.raises(ValueError):
            check_opponent(name, game)
