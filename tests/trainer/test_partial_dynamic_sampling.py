"""Partial rollouts with dynamic sampling (DAPO x APRIL, issue 29): the complete groups whose rewards
are all equal are dropped (to `Collected.dropped`) and further rounds, topped up with fresh tasks,
run until the step has its informative groups; the staleness bound still holds."""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from pathlib import Path

from reinforge.config import load_config
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.run.pipeline import run_training
from reinforge.tasks.task_sampler import TaskSampler
from reinforge.trainer.partial_collect import PartialCollector
from rollout.test_partial_rollout import PARAMS, ScriptedEngine, ScriptedEnv, task
from values.test_curriculum_composes import BY_ANSWER, PARTIAL, TINY


def alternating_scorer() -> RewardScorer:
    """Rows of a task with metadata flat=True all score 0; the others alternate 0, 1, 0, ... per task,
    so each of their groups (scored in one call) holds both values."""
    lock, calls = threading.Lock(), Counter()

    def reward(t, trajectory) -> float:
        if t.metadata["flat"]:
            return 0.0
        with lock:
            calls[t.id] += 1
            return float(calls[t.id] % 2)

    return RewardScorer([NamedReward("alternating", reward, 1.0)], cache=False, isolation="thread")


def groups_of(trajectories) -> dict[int, list]:
    out = defaultdict(list)
    for t in trajectories:
        out[t.group_id].append(t)
    return out


def test_zero_variance_groups_are_dropped_and_more_rounds_fill_the_step() -> None:
    lengths = [2, 11, 3, 4, 12, 2, 9, 3, 3, 10, 5, 2, 8, 2, 12, 3] * 3
    tasks = [task(i, n) for i, n in enumerate(lengths)]
    for i, t in enumerate(tasks):
        t.metadata["flat"] = i % 3 != 0  # two tasks in three give all-equal groups
    engine = ScriptedEngine()
    collector = PartialCollector(ScriptedEnv(), alternating_scorer(), TaskSampler(tasks, seed=0), prompts=2, group_size=2,
                                 params=PARAMS, overprovision=2.0, max_staleness=1, seed=0, dynamic_sampling=True, max_rounds=6)
    rounds, dropped_groups = [], 0
    for step in range(1, 11):
        engine.sync_weights(step - 1)
        collected, _ = collector.collect(engine, step, weights_index=step - 1)
        metrics = collected.reward_metrics
        kept, dropped = groups_of(collected.trajectories), groups_of(collected.dropped)
        assert not set(kept) & set(dropped)  # a group is trained or dropped, never both
        for group in dropped.values():  # only all-equal groups are dropped, and they are the flat tasks'
            assert len({t.reward for t in group}) == 1 and tasks[int(group[0].task_id[1:])].metadata["flat"]
        if metrics["sampling_rounds"] < 6 or len(kept) == 2:
            assert len(kept) == 2 and all(len({t.reward for t in g}) == 2 for g in kept.values())
        assert metrics["train_groups"] == len(kept)
        assert all((step - 1) - t.policy_version <= 1 for t in collected.trajectories)  # the bound holds over rounds
        rounds.append(metrics["sampling_rounds"])
        dropped_groups += len(dropped)
    assert max(rounds) > 1 and dropped_groups > 0, (rounds, dropped_groups)


def test_without_dynamic_sampling_one_round_trains_the_oldest_complete_groups() -> None:
    tasks = [task(i, n) for i, n in enumerate([3, 9, 5, 11, 2, 4] * 2)]
    for t in tasks:
        t.metadata["flat"] = True
    engine = ScriptedEngine()
    collector = PartialCollector(ScriptedEnv(), alternating_scorer(), TaskSampler(tasks, seed=0), 2, 2, PARAMS, 2.0, 1, seed=0)
    collected, _ = collector.collect(engine, 1, weights_index=0)
    assert collected.reward_metrics["sampling_rounds"] == 1 and len(groups_of(collected.trajectories)) == 2 and not collected.dropped


def test_a_run_with_partial_rollouts_and_dynamic_sampling_trains_on_informative_groups(tmp_path: Path) -> None:
    run_training(load_config("default", [
        *TINY, *PARTIAL, BY_ANSWER, "algo.dynamic_sampling=true", "algo.max_sampling_rounds=3", f"trainer.output_dir={tmp_path}",
    ]))
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["stage"] == "rl"]
    assert len(rows) == 4
    assert any(r["sampled_zero_variance_group_frac"] > 0 for r in rows)  # hopeless prompts were sampled and dropped
    assert all(r["sampling_rounds"] > 1 for r in rows if r["sampled_zero_variance_group_frac"] > 0 and r["train_groups"] == 2)
    assert max(r["staleness_max"] for r in rows) <= 1 and any(r["partial_carried_groups"] > 0 for r in rows)
