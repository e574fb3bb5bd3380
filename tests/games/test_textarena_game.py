"""TextArena's two-player games through the games protocol: textarena judges the moves and writes
each player's messages; illegal moves counted, results from textarena, hidden cards stay hidden,
one token-exact trajectory per seat, and a shrunk self-play run. Needs the textarena extra."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

pytest.importorskip("textarena", reason="textarena games need the textarena extra: pip install 'reinforge[textarena]'")
pytestmark = pytest.mark.textarena

from reinforge.config import load_config  # noqa: E402
from reinforge.games.env import GameEnv  # noqa: E402
from reinforge.games.match import MatchRules, new_match  # noqa: E402
from reinforge.games.registry import get_game  # noqa: E402
from reinforge.run.pipeline import run_training  # noqa: E402
from reinforge.tasks.task import Task  # noqa: E402
from tests.games.test_game_rollout import MoveEngine, params  # noqa: E402

RECIPE = str(Path(__file__).parents[2] / "recipes" / "tictactoe-selfplay.yaml")


def match(env_id: str, seed: int = 0, max_illegal_moves: int = 2, max_turns: int = 60):
    return new_match(get_game(f"textarena:{env_id}"), MatchRules(0.0, max_illegal_moves, max_turns), random.Random(seed))


def test_a_tictactoe_game_is_judged_and_scored_by_textarena() -> None:
    m = match("TicTacToe-v0")
    first = m.message(0)
    assert first.startswith("[GAME] You are Player 0 in Tic Tac Toe.") and "Available Moves: '[0]'" in first
    for player, move in [(0, "[0]"), (1, "[3]"), (0, "[1]"), (1, "[4]")]:
        assert m.to_move == player and m.submit(player, move)
        m.message(1 - player)
    assert m.game.legal_moves(m.state) == ["[2]", "[5]", "[6]", "[7]", "[8]"]
    assert m.submit(0, "I play [2] to win")  # textarena finds the move in the text
    assert m.over and m.finish_reason == "stop" and m.rewards() == [1.0, -1.0]
    assert (m.outcome(0), m.outcome(1)) == ("win", "loss") and m.moves == 5


def test_illegal_moves_are_textarenas_counted_told_and_the_limit_loses() -> None:
    m = match("TicTacToe-v0", max_illegal_moves=2)
    m.message(0)
    assert m.submit(0, "[4]")
    m.message(1)
    assert not m.submit(1, "[4]")  # taken: textarena rejects it
    told = m.message(1)
    assert "attempted an invalid move" in told and "occupied" in told
    assert m.illegal == [0, 1] and not m.over and m.to_move == 1
    assert not m.submit(1, "center please")
    assert m.over and m.finish_reason == "illegal_moves" and m.rewards() == [1.0, -1.0] and m.outcome(1) == "loss"


def test_legal_moves_are_exactly_what_textarena_accepts() -> None:
    for env_id in ("TicTacToe-v0", "ConnectFour-v0", "KuhnPoker-v0"):
        rng = random.Random(1)
        m = match(env_id, seed=3, max_illegal_moves=1000, max_turns=1000)
        while not m.over:
            legal = m.game.legal_moves(m.state)
            assert not m.submit(m.to_move, "[nonsense]")
            assert m.submit(m.to_move, rng.choice(legal))
        assert m.finish_reason == "stop" and sum(m.rewards()) == 0.0


def test_kuhn_cards_reach_only_their_holder_before_the_showdown() -> None:
    for seed in range(6):
        m = match("KuhnPoker-v0", seed=seed)
        cards = {p: "JQK"[m.state.env.state.game_state["player_cards"][p]] for p in (0, 1)}
        mover = m.to_move
        seen = m.message(mover)
        assert re.findall(r"Your card is: '(\w)'", seen) == [cards[mover]]
        m.submit(mover, "[check]")
        other = m.message(1 - mover)
        assert set(re.findall(r"Your card is: '(\w)'", other)) == {cards[1 - mover]}
        assert "Showdown" not in seen + other


def test_deals_are_reproducible_and_leave_the_global_random_alone() -> None:
    random.seed(123)
    expected = random.random()
    random.seed(123)
    deals = [match("KuhnPoker-v0", seed=5).state.env.state.game_state["player_cards"] for _ in range(2)]
    assert deals[0] == deals[1] and random.random() == expected


def test_unsupported_and_unknown_games_are_refused() -> None:
    with pytest.raises(ValueError, match="not supported; supported .*textarena:TicTacToe-v0"):
        get_game("textarena:Chess-v0")


def test_self_play_through_the_game_env_gives_each_seat_its_own_trajectory(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=9)
    script = iter(["[0]", "[3]", "[1]", "[4]", "[2]"])
    engine = MoveEngine(tokenizer, env.chat.end_of_turn_id, lambda prompt, call, row: next(script))
    meta = {"game": "textarena:TicTacToe-v0", "seats": ["policy", "policy"], "game_seed": 1, "draw_reward": 0.0,
            "max_illegal_moves": 2, "family": "test", "demo_seat": 0}
    task = Task(id="ta", prompt=[{"role": "user", "content": "?"}], answer="", metadata=meta)
    first, second = env.run_groups(engine, [task], 2, params(env), seed=3)
    assert (first.agent, second.agent) == ("player0", "player1")
    assert first.stats["env_reward"] == 1.0 and second.stats["env_reward"] == -1.0
    one, two = tokenizer.decode(first.token_ids), tokenizer.decode(second.token_ids)
    assert "You are Player 0" in one and "You are Player 1" not in one and "You are Player 1" in two
    sampled = [tokenizer.decode([i for i, m in zip(t.token_ids, t.loss_mask) if m]) for t in (first, second)]
    assert [s.replace("<|end|>", "") for s in sampled] == ["[0][1][2]", "[3][4]"]


def test_a_shrunk_self_play_run(tmp_path) -> None:
    overrides = [
        "task.params.game=textarena:TicTacToe-v0", "task.params.eval_opponents=[random]", "model.preset=nano",
        "model.max_positions=1024", "task.train_size=8", "task.params.eval_games=1", "sft.steps=2", "sft.batch_size=4",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6", "algo.advantage=grpo", "trainer.steps=2",
        "eval.every=2", "trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false",
        "telemetry.wandb=off", f"trainer.output_dir={tmp_path / 'run'}",
    ]
    outcome = run_training(load_config(RECIPE, overrides))
    rows = [json.loads(line) for line in (outcome.run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r["stage"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2] and len([r for r in rows if r["stage"] == "rl"]) == 2
    for r in evals:
        rates = [r[f"game/vs-random/{o}"] for o in ("win", "draw", "loss", "unfinished")]
        assert sum(rates) == pytest.approx(1.0) and 0.0 <= r["illegal_move_rate"] <= 1.0
