"""Simultaneous moves: rock-paper-scissors' rules, and a round's first move never reaches the other
player (neither its text nor its tokens) before both have moved."""

from __future__ import annotations

import random

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.games.env import GameEnv
from reinforge.games.match import Match, MatchRules
from reinforge.games.opponents import check_opponent
from reinforge.games.play import GameRun, play_games
from reinforge.games.registry import get_game
from reinforge.games.rock_paper_scissors import RockPaperScissors, round_winner
from reinforge.run.preflight import preflight
from test_game_rollout import MoveEngine, game_task, params

GAME = RockPaperScissors()


@pytest.mark.parametrize(
    "first, second, winner", [("rock", "scissors", 0), ("scissors", "rock", 1), ("paper", "rock", 0), ("scissors", "paper", 0),
                              ("paper", "scissors", 1), ("rock", "rock", None)],
)
def test_round_winner(first, second, winner) -> None:
    assert round_winner(first, second) == winner


@pytest.mark.parametrize(
    "moves, payoffs",
    [
        (["rock", "scissors", "rock", "scissors", "paper", "paper"], (1.0, -1.0)),  # 2 rounds to 0
        (["rock", "paper", "rock", "rock", "paper", "rock"], (0.0, 0.0)),  # 1 round each, one tie
        (["rock", "paper", "scissors", "rock", "paper", "paper"], (-1.0, 1.0)),
    ],
)
def test_three_rounds_then_the_result(moves, payoffs) -> None:
    state = GAME.initial_state(random.Random(0))
    for i, move in enumerate(moves):
        assert not GAME.is_over(state) and GAME.to_move(state) == i % 2
        assert GAME.legal_moves(state) == ["rock", "paper", "scissors"]
        assert GAME.round_complete(state) == (i % 2 == 0)
        state = GAME.play(state, move)
        assert GAME.round_complete(state) == (i % 2 == 1)  # a round is complete once both are in
    assert GAME.is_over(state) and GAME.legal_moves(state) == [] and GAME.payoffs(state) == payoffs
    with pytest.raises(ValueError):
        GAME.play(GAME.initial_state(random.Random(0)), "lizard")


def test_the_referee_holds_the_first_move_until_the_round_is_complete() -> None:
    match = Match(GAME, MatchRules(max_turns=6), GAME.initial_state(random.Random(0)))
    match.message(0)
    assert match.submit(0, "rock")
    second = match.message(1)  # the second player is asked after the first committed
    assert "rock" not in second.split("\n", 1)[1] and "Round 1." in second  # (the rules line names every move)
    assert match.submit(1, "paper")
    first = match.message(0)
    assert "Opponent played paper." in first and "Score you 0, opponent 1" in first and "Round 2." in first
    assert not match.submit(0, "lizard") and "Illegal move" in match.message(0)  # an illegal move, as in any game
    assert match.submit(0, "scissors")
    second = match.message(1)  # round 1's move of the first player, now that round 1 is over; nothing of round 2's
    assert "Opponent played rock." in second and "scissors" not in second and "Round 2." in second


def test_a_rounds_first_move_never_enters_the_other_players_tokens(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=6)

    def play(first_moves):
        run = GameRun(game_task(["policy", "policy"], game="rock_paper_scissors"), 0, ["policy", "policy"],
                      Match(GAME, MatchRules(max_turns=6), GAME.initial_state(random.Random(0))), random.Random(0))
        moves = {0: iter(first_moves), 1: iter(["rock", "rock", "rock"])}
        seat_of = {}

        def choose(prompt, call, row):
            seat = seat_of.setdefault(call, call % 2)  # the first player moves in even engine calls
            return next(moves[seat])

        play_games(MoveEngine(tokenizer, env.chat.end_of_turn_id, choose), env.chat, env.decode_response, [run], params(env), 0)
        assert run.match.finish_reason == "stop" and run.match.moves == 6
        return run.trajectories(env.chat, 0)

    first_a, second_a = play(["paper", "rock", "rock"])
    first_b, second_b = play(["scissors", "rock", "rock"])
    # the second player's tokens up to the end of its first move: the same whatever the first played
    end_a, end_b = second_a.turn_spans[0][1], second_b.turn_spans[0][1]
    assert second_a.token_ids[:end_a] == second_b.token_ids[:end_b]
    # ...and it learns the move afterwards, in the next round's message
    assert "Opponent played paper." in tokenizer.decode(second_a.token_ids[end_a:])
    assert "Opponent played scissors." in tokenizer.decode(second_b.token_ids[end_b:])
    assert first_a.stats["win"] == 1.0 and first_b.stats["loss"] == 1.0


def test_rock_paper_scissors_is_configured_like_any_game() -> None:
    assert isinstance(get_game("rock_paper_scissors"), RockPaperScissors)
    with pytest.raises(ValueError, match="minimax"):
        check_opponent("minimax", GAME)
    recipe = load_config("recipes/tictactoe-selfplay.yaml", [
        "task.params.game=rock_paper_scissors", "task.params.eval_opponents=[random]", "env.max_turns=8",
        "task.params.train_seats=[[policy, policy]]",
    ])
    preflight(recipe)
    with pytest.raises(ConfigError, match="env.max_turns=4"):
        preflight(recipe.model_copy(update={"env": recipe.env.model_copy(update={"max_turns": 4})}))
