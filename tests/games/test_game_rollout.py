"""The multi-player rollout: each seat's own token-exact trajectory, one engine call per round,
fixed opponents without the engine, illegal moves, cuts, hidden information, warm-up layout."""

from __future__ import annotations

import random
import re

import pytest

from reinforge.config import TaskConfig
from reinforge.engines.base import Generation, SamplingParams
from reinforge.games import tasks as game_tasks
from reinforge.games.env import GameEnv
from reinforge.games.kuhn_poker import KuhnPoker
from reinforge.games.match import Match, MatchRules
from reinforge.games.play import GameRun, play_games
from reinforge.games.tictactoe import TicTacToe
from reinforge.tasks.task import Task


class MoveEngine:
    """Answers each row with `choose(prompt_text, call, row)`, closed by the stop token, and records
    every call (a fixed opponent must never reach it)."""

    policy_version = 7

    def __init__(self, tokenizer, stop_id, choose):
        self.tokenizer, self.stop_id, self.choose, self.calls = tokenizer, stop_id, choose, []

    def generate(self, prompts, params, seed=None):
        self.calls.append((prompts, seed))
        out = []
        for row, prompt in enumerate(prompts):
            text = self.choose(self.tokenizer.decode(prompt), len(self.calls) - 1, row)
            ids = self.tokenizer(text, add_special_tokens=False).input_ids + [self.stop_id]
            out.append(Generation(ids, [-0.5 - 0.01 * i for i in range(len(ids))], "stop", self.policy_version))
        return out


def first_open_cell(prompt: str, call: int, row: int) -> str:
    board = re.findall(r"Board (\S+)\.", prompt)[-1]
    return next(c for c in board if c.isdigit())


def game_task(seats, game="tictactoe", seed=1, draw_reward=0.0, max_illegal_moves=2) -> Task:
    meta = {"game": game, "seats": seats, "game_seed": seed, "draw_reward": draw_reward, "max_illegal_moves": max_illegal_moves,
            "family": "test", "demo_seat": 0}
    return Task(id=f"{game}-{seed}", prompt=[{"role": "user", "content": "?"}], answer="", metadata=meta)


def params(env) -> SamplingParams:
    return SamplingParams(4, stop_token_ids=env.stop_token_ids)


def turn(tokenizer, env, text):
    return tokenizer(text, add_special_tokens=False).input_ids + [env.chat.end_of_turn_id]


def user(env, text, first=False):
    message = [{"role": "user", "content": text}]
    return env.chat.prompt_ids(message) if first else env.chat.observation_ids(message)


def test_self_play_gives_each_seat_its_own_token_exact_trajectory(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=9)
    script = iter(["1", "4", "2", "5", "3"])  # X: 1 2 3 wins the top row; O: 4 5
    engine = MoveEngine(tokenizer, env.chat.end_of_turn_id, lambda prompt, call, row: next(script))
    x, o = env.run_groups(engine, [game_task(["policy", "policy"])], 2, params(env), seed=11, first_group_id=4)
    assert [len(c[0]) for c in engine.calls] == [1] * 5  # one game: one row per round, one round per move

    rules = "Tic-tac-toe. You are {}. Reply with an open cell number.\n"
    x_parts = [
        (user(env, rules.format("X") + "Board 123/456/789. Open 1 2 3 4 5 6 7 8 9. Your move:", first=True), False), (turn(tokenizer, env, "1"), True),
        (user(env, "O took 4.\nBoard X23/O56/789. Open 2 3 5 6 7 8 9. Your move:"), False), (turn(tokenizer, env, "2"), True),
        (user(env, "O took 5.\nBoard XX3/OO6/789. Open 3 6 7 8 9. Your move:"), False), (turn(tokenizer, env, "3"), True),
    ]
    o_parts = [
        (user(env, rules.format("O") + "X took 1.\nBoard X23/456/789. Open 2 3 4 5 6 7 8 9. Your move:", first=True), False), (turn(tokenizer, env, "4"), True),
        (user(env, "X took 2.\nBoard XX3/O56/789. Open 3 5 6 7 8 9. Your move:"), False), (turn(tokenizer, env, "5"), True),
    ]
    for trajectory, parts, reward in ((x, x_parts, 1.0), (o, o_parts, -1.0)):
        assert trajectory.token_ids == [t for ids, _ in parts for t in ids]  # appended as tokenized, never re-tokenized
        assert trajectory.loss_mask == [m for ids, m in parts for _ in ids]
        sampled = [lp for lp, m in zip(trajectory.behaviour_logprobs, trajectory.loss_mask) if m]
        assert sampled == [-0.5 - 0.01 * i for ids, m in parts if m for i in range(len(ids))]
        assert trajectory.prompt_length == len(parts[0][0]) and trajectory.num_turns == len(parts) // 2
        assert trajectory.stats["env_reward"] == reward and trajectory.group_id == 4 and trajectory.policy_version == 7
        assert trajectory.finish_reason == "stop"
    assert (x.agent, o.agent) == ("X", "O")
    assert (x.stats["win"], o.stats["loss"], x.stats["game_moves"]) == (1.0, 1.0, 5.0)


def test_fixed_opponents_answer_without_the_engine_and_games_share_each_call(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=9)
    engine = MoveEngine(tokenizer, env.chat.end_of_turn_id, first_open_cell)
    tasks = [game_task(["policy", "random"], seed=1), game_task(["minimax", "policy"], seed=2)]
    out = env.run_groups(engine, tasks, 3, params(env), seed=0)
    assert len(out) == 6 and [t.group_id for t in out] == [0, 0, 0, 1, 1, 1]
    assert [t.agent for t in out] == ["X"] * 3 + ["O"] * 3
    assert len(engine.calls[0][0]) == 6  # all six games' policy seats in the first call
    assert [len(c[0]) for c in engine.calls] == sorted((len(c[0]) for c in engine.calls), reverse=True)
    assert sum(len(c[0]) for c in engine.calls) == sum(t.num_turns for t in out)
    assert all(t.stats["illegal_moves"] == 0 for t in out)
    assert all(t.stats["loss"] == 1.0 for t in out[3:])  # first-open-cell never beats a perfect X... nor draws


def test_illegal_moves_are_told_counted_and_forfeit_the_game(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=9)
    engine = MoveEngine(tokenizer, env.chat.end_of_turn_id, lambda prompt, call, row: "nine")
    x, o = env.run_groups(engine, [game_task(["policy", "policy"])], 2, params(env), seed=0)
    assert x.finish_reason == o.finish_reason == "illegal_moves"
    assert (x.stats["illegal_moves"], x.stats["env_reward"], o.stats["env_reward"]) == (2.0, -1.0, 1.0)
    assert x.num_turns == 2 and "Illegal move, try again." in x.transcript[2]["text"]
    assert o.num_turns == 0 and not any(o.loss_mask) and o.token_ids  # never moved: its first message, nothing to train
    assert (o.stats["win"], x.stats["loss"]) == (1.0, 1.0)


def test_a_game_past_max_turns_is_cut_and_pays_the_draw_reward(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=3)
    engine = MoveEngine(tokenizer, env.chat.end_of_turn_id, first_open_cell)
    x, o = env.run_groups(engine, [game_task(["policy", "policy"], draw_reward=0.25)], 2, params(env), seed=0)
    assert x.finish_reason == o.finish_reason == "max_turns" and x.stats["game_moves"] == 3
    assert x.stats["env_reward"] == o.stats["env_reward"] == 0.25
    assert x.stats["win"] == x.stats["draw"] == x.stats["loss"] == 0.0  # unfinished, not a draw


def test_max_episode_tokens_ends_the_game(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=9)
    engine = MoveEngine(tokenizer, env.chat.end_of_turn_id, first_open_cell)
    first_message = len(user(env, "Tic-tac-toe. You are X. Reply with an open cell number.\nBoard 123/456/789. Open 1 2 3 4 5 6 7 8 9. Your move:", first=True))
    x, o = env.run_groups(engine, [game_task(["policy", "policy"])], 2, params(env), seed=0, max_episode_tokens=first_message + 10)
    assert x.finish_reason == o.finish_reason == "max_tokens"
    assert len(x.token_ids) <= first_message + 10 and len(o.token_ids) <= first_message + 10


def test_kuhn_hidden_card_never_enters_the_other_players_tokens(tokenizer) -> None:
    env, game = GameEnv(tokenizer, max_turns=3), KuhnPoker()
    moves = {0: ["pass", "bet"], 1: ["bet"]}  # first passes, second bets, first calls: pass-bet-bet

    def runs(first_card, second_card):
        run = GameRun(game_task(["policy", "policy"], game="kuhn_poker"), 0, ["policy", "policy"],
                      Match(game, MatchRules(max_turns=3), (first_card, second_card, "")), random.Random(0))
        played = {0: 0, 1: 0}

        def choose(prompt, call, row):
            seat = 0 if "act first" in prompt else 1
            played[seat] += 1
            return moves[seat][played[seat] - 1]

        play_games(MoveEngine(tokenizer, env.chat.end_of_turn_id, choose), env.chat, env.decode_response, [run], params(env), 0)
        assert run.match.state[2] == "pbb" and run.match.finish_reason == "stop"
        return run.trajectories(env.chat, 0)

    first_vs_j, second_with_j = runs("K", "J")
    first_vs_q, second_with_q = runs("K", "Q")
    assert first_vs_j.token_ids == first_vs_q.token_ids  # the first player's tokens cannot tell J from Q
    assert first_vs_j.num_turns == 2 and "Opponent: bet." in env.tokenizer.decode(first_vs_j.token_ids)
    for second, own in ((second_with_j, "J"), (second_with_q, "Q")):
        text = env.tokenizer.decode(second.token_ids)
        rules, rest = text.split("\n", 1)  # the rules line names all three cards
        assert f"Your card {own}" in rest and "K" not in rest  # the first player's K never shown
    assert runs("J", "Q")[1].token_ids == second_with_q.token_ids  # nor can the second's tell K from J
    assert (first_vs_j.stats["env_reward"], second_with_q.stats["env_reward"]) == (2.0, -2.0)


def test_warm_up_example_is_laid_out_as_the_rollout_lays_out_the_same_game(tokenizer) -> None:
    """Replay a task's random-legal demonstration through the rollout (the engine plays the demo's
    moves for both seats): the demonstrated seat's tokens are the warm-up example's, and the trained
    tokens are exactly its sampled turns."""
    env = GameEnv(tokenizer, max_turns=9)
    splits = game_tasks.load(TaskConfig(source="game", params={"game": "tictactoe"}, train_size=12), seed=3)
    checked = 0
    for task in splits.train:
        seat = task.metadata["demo_seat"]
        own = [m["content"] for m in task.demonstration if m["role"] == "assistant"]
        seen = [m["content"] for m in [*task.prompt, *task.demonstration] if m["role"] == "user"]
        other = [move for text in seen for move in re.findall(r"[XO] took (\d)", text)]
        queue = {seat: list(own), 1 - seat: list(other)}
        game, state = TicTacToe(), "." * 9
        for i in range(len(own) + len(other)):
            state = game.play(state, queue[i % 2][i // 2])
        if not game.is_over(state):
            continue  # the other seat made the last move: the demonstration does not show it

        def choose(prompt, call, row):
            mover = 0 if "You are X" in prompt else 1
            return queue[mover].pop(0)

        engine = MoveEngine(tokenizer, env.chat.end_of_turn_id, choose)
        trajectories = env.run_groups(engine, [Task(task.id, task.prompt, "", metadata={**task.metadata, "seats": ["policy", "policy"]})],
                                      2, params(env), seed=0)
        ids, trained = env.sft_example(task)
        assert trajectories[seat].token_ids == ids and trajectories[seat].loss_mask == trained
        checked += 1
    assert checked >= 3


def test_group_size_must_hold_whole_games(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=9)
    engine = MoveEngine(tokenizer, env.chat.end_of_turn_id, first_open_cell)
    with pytest.raises(ValueError, match="not a multiple of the 2 policy seats"):
        env.run_groups(engine, [game_task(["policy", "policy"])], 3, params(env), seed=0)
    with pytest.raises(ValueError, match="run_groups"):
        env.episode()


@pytest.mark.parametrize("game, moves, payoffs", [("connect_four", "1234567", {-1.0, 0.0, 1.0}), ("kuhn_poker", ["bet", "pass"], {-2.0, -1.0, 1.0, 2.0})])
def test_every_game_plays_through_the_env(tokenizer, game, moves, payoffs) -> None:
    env = GameEnv(tokenizer, max_turns=60)
    engine = MoveEngine(tokenizer, env.chat.end_of_turn_id, lambda prompt, call, row: moves[(call + row) % len(moves)])
    tasks = [game_task(["policy", "random"], game=game, seed=s) for s in range(3)] + [game_task(["policy", "policy"], game=game, seed=9)]
    out = env.run_groups(engine, tasks, 2, params(env), seed=1)
    assert len(out) == 8 and all(t.finish_reason in ("stop", "illegal_moves") for t in out)
    assert all(t.stats["env_reward"] in payoffs and t.num_turns >= 1 for t in out)
    x, o = out[6:]  # a self-play game: zero-sum
    assert x.stats["env_reward"] == -o.stats["env_reward"] and (x.agent, o.agent) == env.game(game).roles


def test_learner_logprobs_match_the_engine_on_every_seat(tokenizer, sharp_nano_model) -> None:
    """Invariant 1 for games: each seat's stored trajectory (its messages, its sampled moves) gives
    the learner the engine's log-probs on every sampled token."""
    import torch

    from float_bounds import logit_bound
    from reinforge.engines.torch_engine import TorchEngine
    from reinforge.learner.batch import collate
    from reinforge.learner.policy_learner import compute_logprobs

    env = GameEnv(tokenizer, max_turns=9)
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    out = env.run_groups(engine, [game_task(["policy", "policy"]), game_task(["policy", "random"], seed=2)], 4,
                         SamplingParams(3, temperature=1.0, stop_token_ids=env.stop_token_ids), seed=5, max_episode_tokens=120)
    assert len(out) == 8 and {t.agent for t in out} == {"X", "O"}
    batch = collate(out, None, tokenizer.pad_token_id)
    mask = batch.loss_mask
    assert mask.sum() >= len(out) - 1  # every seat that moved sampled tokens
    recomputed = compute_logprobs(sharp_nano_model, batch, micro_batch_size=8, temperature=1.0)
    bound = logit_bound(sharp_nano_model, [t.token_ids for t in out])
    assert torch.allclose(recomputed[mask], batch.old_logprobs[mask], atol=bound, rtol=0)
