"""PCL with the prompt-value model, acting in short runs of the tiny model where an item is not one
episode of one player: a self-play game, games against an opponent pool, a game of two distinct
policies, and a gateway agent whose episodes come in pieces.

In each: the value model's metrics are logged every step (each policy's under its name); every
seat-episode of the run, and nothing else, trained a value model (its reliability counts add up to
the run's trajectories, a gateway episode once however many pieces it came in); and the curriculum
picked the step's items: after the first step, the kept items are not the pool's first ones (what a
uniform draw would have kept) and are predicted nearer the target than the pool.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_training
from reinforge.values.curriculum_sampler import CurriculumSampler

ROOT = Path(__file__).parents[2]
PCL = ["prompt_value.enabled=true", "prompt_value.curriculum=pcl", "prompt_value.updates_per_step=5"]
QUIET = ["trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off"]
GAME = [
    "model.preset=nano", "task.train_size=64", "task.params.eval_games=1", "sft.steps=2", "sft.batch_size=4",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "trainer.steps=4", "eval.every=4",
]
STEPS, PROMPTS, GROUP = 4, 4, 4


@pytest.fixture
def draws(monkeypatch) -> list[tuple[list[str], list[str]]]:
    """Every draw of the run's curriculum: (the pool's task ids, the kept ones)."""
    seen: list[tuple[list[str], list[str]]] = []
    draw, next_batch = CurriculumSampler._draw, CurriculumSampler.next_batch

    def spy_draw(self, *args):
        pool = draw(self, *args)
        seen.append(([t.id for t in pool], []))
        return pool

    def spy_next_batch(self, size):
        kept = next_batch(self, size)
        seen[-1][1].extend(t.id for t in kept)
        return kept

    monkeypatch.setattr(CurriculumSampler, "_draw", spy_draw)
    monkeypatch.setattr(CurriculumSampler, "next_batch", spy_next_batch)
    return seen


def train(recipe: str, tmp_path: Path, *overrides: str) -> list[dict]:
    cfg = load_config(str(ROOT / "recipes" / f"{recipe}.yaml"), [*overrides, *QUIET, f"trainer.output_dir={tmp_path / 'run'}"])
    outcome = run_training(cfg)
    rows = [json.loads(line) for line in (outcome.run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["stage"] == "rl"]


def seat_episodes(row: dict, prefix: str) -> float:
    """Seat-episodes a value model has learned from so far (its reliability curve's counts)."""
    return sum(v for k, v in row.items() if k.startswith(f"{prefix}value/reliability/n_"))


def assert_curriculum_acted(rows: list[dict], draws, prefixes: list[str], episodes: int) -> None:
    assert len(rows) == STEPS
    for row in rows:
        for prefix in prefixes:
            if prefix and f"{prefix}trajectories" not in row:  # none of this policy's seats among the step's items
                assert f"{prefix}value/loss" not in row
                continue
            assert math.isfinite(row[f"{prefix}value/loss"]) and 0 <= row[f"{prefix}value/brier"] <= 1
        assert row["value/selected_distance"] <= row["value/pool_distance"]
    # cumulative counts: each policy's latest (a step without its seats does not log them)
    assert sum(max(seat_episodes(row, prefix) for row in rows) for prefix in prefixes) == episodes
    assert len(draws) == STEPS and all(len(pool) == 4 * len(kept) for pool, kept in draws)  # pool_factor 4
    trained_on_outcomes = draws[1:]
    assert any(kept != pool[: len(kept)] for pool, kept in trained_on_outcomes), "PCL kept the pool's first items: a uniform draw"
    assert any(r["value/selected_distance"] < r["value/pool_distance"] for r in rows[1:])


def test_pcl_picks_self_play_games(tmp_path, draws) -> None:
    rows = train("tictactoe-selfplay", tmp_path, *GAME, *PCL)
    assert_curriculum_acted(rows, draws, [""], STEPS * PROMPTS * GROUP)  # every seat's trajectory is one seat-episode


def test_pcl_picks_games_against_the_opponent_pool(tmp_path, draws) -> None:
    pool = ["task.params.train_seats=[[policy, pool], [pool, policy]]", "task.params.opponent_pool={every: 1, size: 2}"]
    rows = train("tictactoe-selfplay", tmp_path, *GAME, *pool, *PCL)
    assert all(r["pool/size"] >= 1 for r in rows)  # the pool played
    assert_curriculum_acted(rows, draws, [""], STEPS * PROMPTS * GROUP)  # the frozen seats are nobody's outcome


def test_pcl_with_two_policies_a_value_model_each(tmp_path, draws) -> None:
    rows = train("describer-guesser", tmp_path, *GAME, "task.params.eval_games=1", "algo.epochs=1", "algo.mini_batches=1", *PCL)
    prefixes = ["policy/describer/", "policy/guesser/"]
    assert_curriculum_acted(rows, draws, prefixes, STEPS * PROMPTS * GROUP)
    for prefix in prefixes:  # each learned from its own seats only
        learned = max(seat_episodes(row, prefix) for row in rows)
        assert 0 < learned < STEPS * PROMPTS * GROUP and learned == sum(r.get(f"{prefix}trajectories", 0) for r in rows)


def test_pcl_picks_the_tasks_of_a_gateway_agent_one_outcome_per_episode(tmp_path, draws) -> None:
    agent = f"env.agent={ROOT / 'tests' / 'values' / 'pieces_agent.py'}:two_histories"
    rows = train(
        "gateway-agent", tmp_path, "model.preset=nano", "task.train_size=64", "task.eval_size=4", "sft.steps=5", "sft.batch_size=8",
        f"rollout.prompts_per_step={PROMPTS}", f"rollout.group_size={GROUP}", "rollout.max_new_tokens=12", f"trainer.steps={STEPS}",
        f"eval.every={STEPS}", "eval.samples=1", agent, "env.agent_timeout_s=60", *PCL,
    )
    assert all(r["env/splits"] > 0 for r in rows)  # the agent rewrote its history: episodes came in pieces (two trajectories each)
    assert_curriculum_acted(rows, draws, [""], STEPS * PROMPTS * GROUP)  # one outcome per episode, not per piece


def test_pcl_with_two_policies_under_the_async_schedule(tmp_path, draws) -> None:
    # The producer draws with a versioned copy of each policy's value model, featurized by that policy's lane.
    rows = train("describer-guesser", tmp_path, *GAME, "task.params.eval_games=1", "algo.epochs=1", "algo.mini_batches=1", *PCL,
                 "trainer.schedule=async", "trainer.max_staleness=1", "algo.tis_cap=2.0")
    assert_curriculum_acted(rows, draws, ["policy/describer/", "policy/guesser/"], STEPS * PROMPTS * GROUP)
