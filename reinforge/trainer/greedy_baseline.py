"""ReMax's baseline: one greedy rollout of each prompt, scored like the samples, its reward set on
every sampled trajectory of that prompt (Trajectory.baseline_reward)."""

from __future__ import annotations

import dataclasses
import time

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.base import Env
from reinforge.rewards.scorer import RewardScorer
from reinforge.rollout.episodes import rollout_groups
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


def attach_greedy_baselines(
    engine: Engine, env: Env, scorer: RewardScorer, tasks: list[Task], trajectories: list[Trajectory],
    params: SamplingParams, seed: int, max_episode_tokens: int | None = None, env_workers: int = 8,
) -> dict[str, float]:
    """Roll out each task once at temperature 0 with the same weights, score it, and give its reward
    to the task's sampled trajectories. A greedy rollout whose reward failed marks its task's
    samples failed too (`reward_failures['greedy_baseline']`), so reward.on_error=drop leaves the
    group out rather than training it against a made-up baseline. Returns greedy_reward_mean and
    greedy_rollout_s."""
    t0 = time.perf_counter()
    greedy = rollout_groups(
        engine, env, tasks, 1, dataclasses.replace(params, temperature=0.0), seed=seed,
        max_episode_tokens=max_episode_tokens, env_workers=env_workers,
    )
    scorer.score({t.id: t for t in tasks}, greedy)
    by_task = {g.task_id: g for g in greedy}
    for t in trajectories:
        baseline = by_task[t.task_id]
        t.baseline_reward = baseline.reward
        if baseline.reward_failures:
            t.reward_failures["greedy_baseline"] = "; ".join(f"{k}: {v}" for k, v in baseline.reward_failures.items())
    return {
        "greedy_reward_mean": sum(g.reward for g in greedy) / max(len(greedy), 1),
        "greedy_rollout_s": time.perf_counter() - t0,
    }
