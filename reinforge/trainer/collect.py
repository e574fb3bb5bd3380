"""Collecting a step's scored groups, optionally with DAPO dynamic sampling.

Dynamic sampling (Yu et al. 2025, DAPO, section 3.2): a group whose rewards are all equal has
zero group-relative advantage and only dilutes the batch, so such groups are dropped and more
tasks are sampled until `prompts_per_step` informative groups are in hand, for at most
`max_rounds` rollout rounds. If the cap is hit the step trains on the groups it has (never on
none: a step with no informative group keeps the last round's groups, whose advantages are 0).
The dropped groups come back beside the kept ones (`Collected.dropped`): left out of the loss, their
outcomes still train the prompt-value model (reinforge.values.pending_predictions).
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.base import Env
from reinforge.rewards.scorer import RewardScorer
from reinforge.rollout.episode_parts import agent_failed
from reinforge.rollout.episodes import rollout_groups
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task
from reinforge.trainer.greedy_baseline import attach_greedy_baselines
from reinforge.tasks.task_sampler import TaskSampler


@dataclass
class Collected:
    trajectories: list[Trajectory]
    tasks: dict[str, Task]
    reward_metrics: dict[str, float]
    rounds: int
    rollout_seconds: float
    reward_seconds: float
    pruned: list[Trajectory] = field(default_factory=list)  # stopped by rollout pruning: not scored, not trained
    dropped: list[Trajectory] = field(default_factory=list)  # scored groups dynamic sampling left out of the step


def informative_groups(trajectories: list[Trajectory]) -> list[list[Trajectory]]:
    groups: dict[int, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[t.group_id].append(t)
    # An agent episode without a result has no reward (it leaves the loss): it tells nothing apart.
    return [g for g in groups.values() if len({t.reward for t in g if not agent_failed(t)}) > 1]


def keep_informative(trajectories: list[Trajectory], scorer: RewardScorer) -> list[Trajectory]:
    """Dynamic sampling's keep (DAPO): the trajectories of the groups whose rewards differ. A group
    with a failed reward would be dropped from the loss (reward.on_error=drop): it does not count as
    informative, or the step would train on fewer groups than it needs."""
    dropping = getattr(scorer, "on_error", "fallback") == "drop"
    return [t for group in informative_groups(trajectories) if not (dropping and any(t.reward_failures for t in group)) for t in group]


def count_groups(trajectories: list[Trajectory]) -> int:
    """Groups, not rows: an agent episode may come as several trajectories (rollout.episode_parts)."""
    return len({t.group_id for t in trajectories})


def first_groups(trajectories: list[Trajectory], groups: int) -> list[Trajectory]:
    """The trajectories of the first `groups` groups, in order."""
    chosen: set[int] = set()
    for t in trajectories:
        if len(chosen) == groups:
            break
        chosen.add(t.group_id)
    return [t for t in trajectories if t.group_id in chosen]


def step_seed(seed: int, step: int) -> int:
    """The sampling seed of RL step `step` of a run seeded `seed`."""
    return seed * 1_000_003 + step


def round_seed(step_seed: int, round_: int) -> int:
    """The seed of sampling round `round_` (0, 1, ...) of a step: rounds never share a stream."""
    return step_seed * 16 + round_


def collect_groups(
    engine: Engine,
    env: Env,
    scorer: RewardScorer,
    sampler: TaskSampler,
    prompts: int,
    group_size: int,
    params: SamplingParams,
    seed: int,
    dynamic_sampling: bool = False,
    max_rounds: int = 1,
    max_episode_tokens: int | None = None,
    env_workers: int = 8,
    decode_hook=None,
    greedy_baseline: bool = False,
) -> Collected:
    """`seed` is the step's seed; each round samples with its own derived seed (rounds < 16).
    `decode_hook` (rollout pruning): the rows it stops leave the round before scoring (`Collected.pruned`).
    `greedy_baseline` (an estimator's needs_greedy_baseline, ReMax): each round's prompts are also
    rolled out once greedily and scored, and that reward set on their samples (`baseline_reward`)."""
    kept: list[Trajectory] = []
    tasks: dict[str, Task] = {}
    rollout_s = reward_s = 0.0
    metrics: dict[str, float] = {}
    rounds, next_group = 0, 0
    sampled_tokens = zero_variance_groups = 0  # over every round, the groups dynamic sampling dropped included
    pruned: list[Trajectory] = []
    scored: list[Trajectory] = []  # every round's, for the groups dynamic sampling drops
    while True:
        rounds += 1
        needed = prompts - count_groups(kept)
        batch = sampler.next_batch(needed)
        tasks.update({t.id: t for t in batch})
        t0 = time.perf_counter()
        trajectories = rollout_groups(
            engine, env, batch, group_size, params, seed=round_seed(seed, rounds - 1), first_group_id=next_group,
            max_episode_tokens=max_episode_tokens, env_workers=env_workers, decode_hook=decode_hook,
        )
        sampled_tokens += sum(t.num_sampled_tokens for t in trajectories)  # pruned rows' tokens were sampled too
        if decode_hook is not None:
            pruned += [t for t in trajectories if t.finish_reason == "pruned"]
            trajectories = [t for t in trajectories if t.finish_reason != "pruned"]
        t1 = time.perf_counter()
        round_metrics = scorer.score(tasks, trajectories)
        reward_s += time.perf_counter() - t1
        if greedy_baseline:
            round_metrics.update(attach_greedy_baselines(
                engine, env, scorer, batch, trajectories, params, round_seed(seed, rounds - 1), max_episode_tokens, env_workers,
            ))
        rollout_s += t1 - t0
        next_group += len(batch)
        zero_variance_groups += len(batch) - len(informative_groups(trajectories))
        if rounds == 1:
            metrics = round_metrics  # the reward curve reports what the policy got, before filtering
        if not dynamic_sampling:
            kept = trajectories
            break
        scored += trajectories
        kept += keep_informative(trajectories, scorer)
        if count_groups(kept) >= prompts or rounds >= max_rounds:
            if not kept:
                kept = trajectories
            break
    kept = first_groups(kept, prompts)
    kept_groups = {t.group_id for t in kept}
    dropped = [t for t in scored if t.group_id not in kept_groups]  # (a prompt-value model learns from them too)
    metrics = {
        **metrics, "sampling_rounds": float(rounds), "train_groups": float(count_groups(kept)),
        "sampled_tokens": float(sampled_tokens), "sampled_zero_variance_group_frac": zero_variance_groups / next_group,
    }
    return Collected(kept, tasks, metrics, rounds, rollout_s, reward_s, pruned, dropped)
