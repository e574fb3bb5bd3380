"""How a step's trajectories become the prompt-value model's samples when an item is not one
episode of one player: a game's trained seats (each its own outcome, its own policy's model) and a
gateway agent's episode in pieces (one outcome); and PCL over game items, seat by seat."""

from __future__ import annotations

import copy
import zlib
from types import SimpleNamespace

import torch

from reinforge.config import PromptValueConfig, load_config
from reinforge.games.registry import get_game
from reinforge.games.value_items import trained_seat_items
from reinforge.rollout.episode_parts import AGENT_ERROR
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.registry import load_tasks
from reinforge.tasks.task import Task
from reinforge.values.curriculum_sampler import CurriculumSampler
from reinforge.values.item_seats import game_seats, seat_outcomes

WIDTH = 64


def featurize(tasks: list[Task]) -> torch.Tensor:
    """A hashed bag of words of each view's text: distinct texts, distinct directions (what a policy's states stand in for)."""
    out = torch.zeros(len(tasks), WIDTH, dtype=torch.float64)
    for row, task in enumerate(tasks):
        for word in str(task.prompt[0]["content"]).split():
            out[row, zlib.crc32(word.encode()) % WIDTH] += 1.0
    return out


def seat(task_id: str, group: int, role: str | None, reward: float, part: int = 0, finish: str = "stop") -> Trajectory:
    return Trajectory(
        task_id=task_id, group_id=group, token_ids=[1, 2], loss_mask=[False, True], behaviour_logprobs=[0.0, -1.0],
        turn_spans=[(1, 2)], prompt_length=1, response_text="x", policy_version=0, finish_reason=finish,
        rewards={"game": reward}, reward=reward, agent=role, episode_part=part,
    )


def game_tasks(recipe: str, seats: str, size: int) -> list[Task]:
    cfg = load_config(recipe, [f"task.params.train_seats={seats}", f"task.train_size={size}", "task.params.eval_games=1"])
    return load_tasks(cfg.task, seed=0).train


GAMES = SimpleNamespace(game=get_game)  # what game_seats asks of the env: the game by name


def test_a_self_play_group_is_one_sample_per_seat_its_win_rate_over_the_group() -> None:
    # Group 0: two self-play games of one task, X won the first (O lost), the second was a draw.
    # Group 1: a game against the random player: one trained seat, O, who lost.
    steps = [seat("t0", 0, "X", 1.0), seat("t0", 0, "O", -1.0), seat("t0", 0, "X", 0.0), seat("t0", 0, "O", 0.0),
             seat("t1", 1, "O", -1.0)]
    outcomes = seat_outcomes(steps, component=None)
    # success = the reward clipped to [0, 1]: a win 1, a draw (draw_reward 0) and a loss 0
    assert outcomes == {(0, "t0#X"): [1.0, 0.0], (0, "t0#O"): [0.0, 0.0], (1, "t1#O"): [0.0]}


def test_a_gateway_episode_in_pieces_is_one_sample_and_a_failed_agent_none() -> None:
    steps = [
        seat("t0", 0, None, 1.0), seat("t0", 0, None, 1.0, part=1), seat("t0", 0, None, 1.0, part=2),  # one episode, 3 pieces
        seat("t0", 0, None, 0.0),
        seat("t0", 0, None, 0.0, finish=AGENT_ERROR),  # the agent raised: no outcome
    ]
    assert seat_outcomes(steps, component=None) == {(0, "t0"): [1.0, 0.0]}


def test_seats_train_their_own_policys_value_model_with_the_seats_pass_rate() -> None:
    tasks = game_tasks("describer-guesser", "[[describer, guesser], [describer, literal], [literal, guesser]]", 3)
    cfg = PromptValueConfig(enabled=True, curriculum="uniform", updates_per_step=1)
    sampler = CurriculumSampler(tasks, 0, cfg, {"describer": featurize, "guesser": featurize}, {"describer": WIDTH, "guesser": WIDTH},
                                game_seats(GAMES), {"describer": "policy/describer/", "guesser": "policy/guesser/"})
    batch = sampler.next_batch(3)
    by_seats = {tuple(t.metadata["seats"]): t.id for t in batch}
    pair, alone_d, alone_g = (by_seats[s] for s in (("describer", "guesser"), ("describer", "literal"), ("literal", "guesser")))
    trajectories = [
        seat(pair, 0, "describer", 1.0), seat(pair, 0, "guesser", 1.0), seat(pair, 0, "describer", 0.0), seat(pair, 0, "guesser", 0.0),
        seat(alone_d, 1, "describer", 1.0), seat(alone_d, 1, "describer", 1.0),
        seat(alone_g, 2, "guesser", -1.0), seat(alone_g, 2, "guesser", 1.0),
    ]
    metrics = sampler.observe(trajectories)
    # The describer's model: its two seats (the pair's: 1 of 2 won; with the literal guesser: 2 of 2).
    assert [(rate, size) for _, _, rate, size in sampler.values["describer"].buffer] == [(0.5, 2), (1.0, 2)]
    # The guesser's: the pair's game again, from its seat, and its game with the literal describer (a forfeit is a loss).
    assert [(rate, size) for _, _, rate, size in sampler.values["guesser"].buffer] == [(0.5, 2), (0.5, 2)]
    assert metrics["policy/describer/value/pass_rate"] == 0.75 and metrics["policy/guesser/value/pass_rate"] == 0.5
    assert "value/brier" not in metrics and not sampler.pending  # every seat's metrics under its policy's name
    # Each seat read the item as it meets it: its own role, the table, and the deal only where the seat sees it.
    game = get_game("describer_guesser")
    pair_task = next(t for t in batch if t.id == pair)
    describer_text, guesser_text = (s.messages[0]["content"] for s in trained_seat_items(game, pair_task))
    assert "You are the describer" in describer_text and "Your clue for" in describer_text
    assert "You are the guesser" in guesser_text and not any(thing in guesser_text.split("Things")[0] for thing in ("cherry", "banana", "lime", "sky"))
    assert "Players: describer describer, guesser guesser." in describer_text


def test_pcl_keeps_the_game_items_whose_seats_are_predicted_nearest_the_target() -> None:
    tasks = game_tasks("tictactoe-selfplay", "[[policy, policy], [policy, random], [random, policy], [policy, minimax], [minimax, policy]]", 200)
    cfg = PromptValueConfig(enabled=True, curriculum="pcl", pool_factor=4, updates_per_step=30, lr=1e-2)
    sampler = CurriculumSampler(tasks, 0, cfg, featurize, WIDTH, game_seats(GAMES))
    # The policy wins half its self-play games from each seat, 3 of 4 against the random player, none against minimax.
    win_rate = {("policy", "policy"): 0.5, ("policy", "random"): 0.75, ("random", "policy"): 0.75, ("policy", "minimax"): 0.0,
                ("minimax", "policy"): 0.0}
    drawn_pools: list[list[Task]] = []
    draw = sampler._draw
    sampler._draw = lambda *args: drawn_pools.append(draw(*args)) or drawn_pools[-1]
    for _ in range(6):
        batch = sampler.next_batch(8)
        trajectories = []
        for g, task in enumerate(batch):
            wins = round(4 * win_rate[tuple(task.metadata["seats"])])
            for role, who in zip(("X", "O"), task.metadata["seats"]):
                if who == "policy":
                    trajectories += [seat(task.id, g, role, 1.0 if k < wins else -1.0) for k in range(4)]
        metrics = sampler.observe(trajectories)
    share = lambda items: sum("minimax" in t.metadata["seats"] for t in items) / len(items)  # noqa: E731
    kept = sampler.next_batch(8)
    pool = drawn_pools[-1]
    assert share(pool) > 0.2 and share(kept) < share(pool) / 2  # the hopeless games are left in the pool
    # The model tells the seatings apart: what it now predicts for a seat of each kind of game.
    first_of = {tuple(t.metadata["seats"]): t for t in reversed(tasks)}
    seats_of = game_seats(GAMES)
    _, predicted, _ = sampler._predict([s for key in win_rate for s in seats_of(first_of[key])])
    selfplay_x, selfplay_o, vs_random_x, vs_random_o, vs_minimax_x, vs_minimax_o = predicted.tolist()
    assert max(vs_minimax_x, vs_minimax_o) < min(selfplay_x, selfplay_o, vs_random_x, vs_random_o) - 0.2
    assert "value/loss" in metrics and "value/brier" in metrics
    assert sampler.draw_metrics["value/selected_distance"] < sampler.draw_metrics["value/pool_distance"]


def test_a_restored_sampler_of_two_policies_draws_and_predicts_exactly_as_the_original() -> None:
    tasks = game_tasks("describer-guesser", "[[describer, guesser], [describer, literal], [literal, guesser]]", 30)
    cfg = PromptValueConfig(enabled=True, curriculum="pcl", pool_factor=2, updates_per_step=3)

    def make() -> CurriculumSampler:
        return CurriculumSampler(tasks, 0, cfg, {"describer": featurize, "guesser": featurize}, {"describer": WIDTH, "guesser": WIDTH},
                                 game_seats(GAMES), {"describer": "policy/describer/", "guesser": "policy/guesser/"})

    def step(s: CurriculumSampler) -> tuple[list[str], dict]:
        batch = s.next_batch(4)
        trajectories = [
            seat(t.id, g, role, float((g + k) % 2)) for g, t in enumerate(batch) for k in range(2)
            for role, who in zip(("describer", "guesser"), t.metadata["seats"]) if who != "literal"
        ]
        metrics = s.observe(trajectories)
        return [t.id for t in batch], {k: v for k, v in metrics.items() if "seconds" not in k}

    a = make()
    for _ in range(3):
        step(a)
    b = make()
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as through a checkpoint: no shared tensors
    assert set(a.state_dict()["policies"]) == {"describer", "guesser"}
    for _ in range(3):
        assert step(a) == step(b)
