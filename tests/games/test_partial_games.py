"""Partial rollouts of games with a scripted engine: games pause between moves and mid-turn, resume
(also through a pickled checkpoint) exactly as they would have gone on, and tag each token with the
weights that sampled it; a retired pool member stays while a paused game seats it.

The scripted engine answers a turn with some spaces, then the first open cell, then the end of the
turn, one token per tick; the number of spaces depends on the board, so the games' turns end at
different ticks and a round's stop rule cuts some of them short. It reads the turn sampled so far
from the end of the prompt, so a turn resumed from its tokens continues as it would have gone on.
"""

from __future__ import annotations

import pickle
import re

import torch

from reinforge.engines.base import Generation, SamplingParams
from reinforge.games.env import GameEnv
from reinforge.games.partial_play import GameRounds
from reinforge.games.pool import OpponentPool, OpponentPoolSpec
from reinforge.tasks.task import Task


class SpacesThenMove:
    def __init__(self, tokenizer, end_of_turn: int):
        self.tokenizer, self.end = tokenizer, end_of_turn
        (self.space,) = tokenizer(" ", add_special_tokens=False).input_ids
        self.policy_version = 0
        self.aborted = 0

    def intended(self, prompt: list[int]) -> tuple[list[int], int]:
        """The whole turn this prompt's board asks for, and how much of it the prompt already holds."""
        text = self.tokenizer.decode(prompt)
        board = re.findall(r"Board (\S+)\.", text)[-1]
        cell = next(c for c in board if c.isdigit())
        (digit,) = self.tokenizer(cell, add_special_tokens=False).input_ids
        spaces = (int(cell) + sum(c in "XO" for c in board)) % 4
        turn = [self.space] * spaces + [digit, self.end]
        held = next(k for k in range(len(turn) - 1, -1, -1) if k == 0 or prompt[-k:] == turn[:k])  # the start it already holds
        return turn, held

    def generate(self, prompts, params, seed=None, budgets=None, stop_when=None):
        budgets = budgets or [params.max_new_tokens] * len(prompts)
        rest, starts = [], []
        for prompt in prompts:
            turn, held = self.intended(prompt)
            rest.append(turn[held:])
            starts.append(held)
        ends = [min(len(r), b) for r, b in zip(rest, budgets)]
        finished = torch.zeros(len(prompts), dtype=torch.bool)
        stopped_at = None
        for tick in range(1, max(ends) + 1):
            newly = [i for i, end in enumerate(ends) if end == tick]
            if newly:
                finished[newly] = True
                if stop_when is not None and not finished.all() and stop_when(finished.clone()):
                    stopped_at = tick
                    break
        out = []
        for i, (r, end, held) in enumerate(zip(rest, ends, starts)):
            n = end if stopped_at is None or finished[i] else stopped_at
            reason = "aborted" if n < end else ("stop" if end == len(r) else "length")
            self.aborted += reason == "aborted"
            out.append(Generation(r[:n], [-0.1 * (held + k + 1) for k in range(n)], reason, self.policy_version))
        return out


def game_task(i: int, seats: list[str]) -> Task:
    meta = {"game": "tictactoe", "seats": seats, "game_seed": i, "draw_reward": 0.0, "max_illegal_moves": 2, "family": "test", "demo_seat": 0}
    return Task(id=f"tictactoe-{i}", prompt=[{"role": "user", "content": "?"}], answer="", metadata=meta)


TASKS = [game_task(1, ["policy", "random"]), game_task(2, ["random", "policy"]), game_task(3, ["policy", "random"]), game_task(4, ["policy", "policy"])]


def start(env: GameEnv, rounds: GameRounds, engine) -> list:
    return [rounds.start_group(task, key, 2, engine) for key, task in enumerate(TASKS)]


def play_whole(tokenizer) -> tuple[list, list]:
    env = GameEnv(tokenizer, max_turns=9)
    engine = SpacesThenMove(tokenizer, env.chat.end_of_turn_id)
    rounds = GameRounds(env, None)
    groups = start(env, rounds, engine)
    rounds.sample(engine, groups, SamplingParams(6, stop_token_ids=env.stop_token_ids), 3, 0, len(groups), [False] * len(groups))
    assert engine.aborted == 0 and all(g.complete for g in groups)
    return groups, [t for i, g in enumerate(groups) for t in rounds.trajectories(g, i)]


def same_trajectories(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert (x.token_ids, x.loss_mask, x.behaviour_logprobs, x.turn_spans, x.transcript, x.finish_reason, x.stats) == (
            y.token_ids, y.loss_mask, y.behaviour_logprobs, y.turn_spans, y.transcript, y.finish_reason, y.stats,
        )


def test_a_paused_game_resumes_as_it_would_have_gone_on(tokenizer) -> None:
    whole_groups, whole = play_whole(tokenizer)

    env = GameEnv(tokenizer, max_turns=9)
    engine = SpacesThenMove(tokenizer, env.chat.end_of_turn_id)
    rounds = GameRounds(env, None)
    params = SamplingParams(6, stop_token_ids=env.stop_token_ids)
    groups = start(env, rounds, engine)
    stats = rounds.sample(engine, groups, params, 3, 0, 1, [False] * len(groups))
    assert sum(g.complete for g in groups) >= 1 and not all(g.complete for g in groups)
    paused = [game for g in groups for game in g.episodes if not game.done]
    assert stats.aborted > 0 and any(game.turn.token_ids for game in paused), "no turn was cut mid-generation"
    assert any(not game.asked for game in paused), "no game paused between moves"
    env.game("tictactoe").__dict__["cache"] = lambda: None  # rules may hold what does not pickle (minimax's cache)
    groups = pickle.loads(pickle.dumps(groups))  # a checkpoint holds them as data
    for group in groups:
        rounds.restore(group)
    rounds.sample(engine, groups, params, 4, 1, len(groups), [False] * len(groups))
    assert all(g.complete for g in groups) and any(game.rounds == 2 for g in groups for game in g.episodes)
    resumed = [t for i, g in enumerate(groups) for t in rounds.trajectories(g, i)]
    same_trajectories(resumed, whole)
    assert [game.run.match.log for g in groups for game in g.episodes] == [game.run.match.log for g in whole_groups for game in g.episodes]


def test_resumed_turns_carry_the_newer_version_and_the_trajectory_its_oldest(tokenizer) -> None:
    env = GameEnv(tokenizer, max_turns=9)
    engine = SpacesThenMove(tokenizer, env.chat.end_of_turn_id)
    rounds = GameRounds(env, None)
    params = SamplingParams(6, stop_token_ids=env.stop_token_ids)
    groups = start(env, rounds, engine)
    rounds.sample(engine, groups, params, 3, 0, 1, [False] * len(groups))
    cut_mid_turn = {id(game) for g in groups for game in g.episodes if game.turn.token_ids}
    engine.policy_version = 1  # new weights for the next step
    rounds.sample(engine, groups, params, 4, 1, len(groups), [False] * len(groups))
    mixed_turns = mixed = 0
    for i, group in enumerate(groups):
        for trajectory in rounds.trajectories(group, i):
            sampled = [v for v, m in zip(trajectory.token_versions, trajectory.loss_mask) if m]
            assert len(trajectory.token_versions) == len(trajectory.token_ids)
            assert sampled == sorted(sampled) and set(sampled) <= {0, 1}
            assert all(v == -1 for v, m in zip(trajectory.token_versions, trajectory.loss_mask) if not m)
            if sampled:
                assert trajectory.policy_version == sampled[0]
            mixed += len(set(sampled)) > 1
            mixed_turns += any(len(set(trajectory.token_versions[a:b])) > 1 for a, b in trajectory.turn_spans)
    assert cut_mid_turn and mixed > 0 and mixed_turns > 0, (len(cut_mid_turn), mixed, mixed_turns)
    rounds_before = [game.rounds for g in groups for game in g.episodes]
    fresh = rounds.start_group(TASKS[0], len(groups), 2, engine)
    stats = rounds.sample(engine, [*groups, fresh], params, 5, 2, len(groups), [False] * (len(groups) + 1))
    assert stats.rows == 0 and fresh.episodes[0].rounds == 0  # the quota was met already: nothing sampled, nothing "resumed"
    assert [game.rounds for g in groups for game in g.episodes] == rounds_before


def test_a_member_leaving_the_pool_stays_while_a_paused_game_seats_it() -> None:
    pool = OpponentPool(OpponentPoolSpec(every=1, size=1), seed=0)
    model = torch.nn.Linear(2, 2)
    pool.snapshot(0, model)
    pool.pin({"pool@0"})
    pool.snapshot(1, model)
    assert [m.name for m in pool.members] == ["pool@1"] and pool.member("pool@0").step == 0
    assert pool.choose() == "pool@1"  # a retired member is never drawn for a new game
    restored = OpponentPool(OpponentPoolSpec(every=1, size=1), seed=0)
    restored.load_state_dict(pool.state_dict())
    assert restored.member("pool@0").step == 0
    pool.pin(set())  # its game ended
    assert [m.name for m in pool.retired] == []
    pool.snapshot(2, model)
    assert [m.name for m in pool.members] == ["pool@2"] and pool.retired == []
