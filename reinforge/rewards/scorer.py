"""Scores trajectories with several named reward components, each call under a timeout.

A component that raises or exceeds its timeout gives `fallback` (default 0) for that sample; the
error is written on the trajectory and counted. When more than `max_error_fraction` of a batch's samples have an
error, the run stops with the first traceback: one bad sample never kills a run, a broken reward
function always does, quickly and with its message.

The per-component scores stay on `trajectory.rewards` (ungated, for metrics and gdpo); the total
`trajectory.reward` is `reinforge.rewards.combine.combine` of them (weighted sum by default, or a
product, with optional gates and clipping).

With `cache=True`, scores of deterministic components (a reward fn opts out with a class attribute
`deterministic = False`) are remembered by (task id, response text, finish reason, sampled-token
count, component name): a response seen before, or repeated within a batch (common in a group),
is scored once. The finish reason and token count are in the key because format and overlong
rewards read them. Failed and timed-out calls are never cached.
"""

from __future__ import annotations

import statistics
import time
import traceback
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from reinforge.rewards.base import RewardFn
from reinforge.rewards.combine import CombineMode, GateLike, combine
from reinforge.rewards.group import GroupRewardFn
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


class RewardFailure(RuntimeError):
    pass


@dataclass
class NamedReward:
    """A named part of the reward. A `group` part is called once per group (all responses to one
    task: majority vote, pairwise preference, tournament) and returns one score per response."""

    name: str
    fn: RewardFn | GroupRewardFn
    weight: float
    group: bool = False


def is_batched(component: NamedReward) -> bool:
    """A per-sample reward that can also score a whole batch in one call (`score_batch`)."""
    return not component.group and callable(getattr(component.fn, "score_batch", None))


def is_deterministic(fn: RewardFn) -> bool:
    """A reward fn is deterministic (cacheable) unless it says `deterministic = False`."""
    return bool(getattr(fn, "deterministic", True))


class RewardScorer:
    def __init__(
        self,
        components: list[NamedReward],
        timeout_s: float = 10.0,
        max_error_fraction: float = 0.5,
        workers: int = 4,
        combine: CombineMode = "weighted_sum",
        gates: Iterable[GateLike] = (),
        clip: tuple[float, float] | None = None,
        fallback: float = 0.0,
        cache: bool = False,
        cache_size: int = 100_000,
    ):
        if not components:
            raise ValueError("at least one reward component is needed")
        self.components = components
        self.timeout_s = timeout_s
        self.max_error_fraction = max_error_fraction
        self.workers = workers
        self.combine_mode = combine
        self.gates = list(gates)
        self.clip = clip
        self.fallback = float(fallback)
        self.cache_enabled = cache
        self.cache_size = cache_size
        self._cache: OrderedDict[Hashable, float] = OrderedDict()
        self._weights = {c.name: c.weight for c in components}
        names = set(self._weights)
        for gate in self.gates:
            for name in (gate.part, gate.requires):
                if name not in names:
                    raise ValueError(f"reward gate names unknown component {name!r}; components: {', '.join(sorted(names))}")
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="reward")

    def _cache_key(self, component: NamedReward, trajectory: Trajectory) -> Hashable | None:
        if component.group or not (self.cache_enabled and is_deterministic(component.fn)):
            return None
        return (trajectory.task_id, trajectory.response_text, trajectory.finish_reason, trajectory.num_sampled_tokens, component.name)

    def _remember(self, key: Hashable | None, value: float) -> None:
        if key is None:
            return
        self._cache[key] = value
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def state_dict(self) -> dict:
        """What scoring carries from step to step: the cache and any stateful reward's state."""
        return {
            "cache": list(self._cache.items()),
            "components": {c.name: c.fn.state_dict() for c in self.components if hasattr(c.fn, "state_dict")},
        }

    def load_state_dict(self, state: dict) -> None:
        self._cache = OrderedDict(state["cache"])
        for component in self.components:
            if component.name in state["components"]:
                component.fn.load_state_dict(state["components"][component.name])

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def score(self, tasks: dict[str, Task], trajectories: list[Trajectory]) -> dict[str, float]:
        """Fill `rewards` and `reward` of each trajectory; return reward metrics."""
        score_started = time.monotonic()
        started: dict[int, float] = {}  # call index -> when a worker picked it up

        def timed_call(index: int, fn: RewardFn, task: Task, trajectory: Trajectory) -> float:
            started[index] = time.monotonic()
            return float(fn(task, trajectory))

        def timed_group_call(index: int, fn, task: Task | list[Task], group: list[Trajectory]) -> list[float]:
            started[index] = time.monotonic()
            values = [float(v) for v in (fn.score_batch(task, group) if isinstance(task, list) else fn(task, group))]
            if len(values) != len(group):
                raise ValueError(f"reward returned {len(values)} scores for {len(group)} samples")
            return values

        # One call per (trajectory, component), except that cached scores are reused and
        # trajectories sharing a cache key within the batch share one call.
        calls: dict[Future, tuple[list[Trajectory], NamedReward, int, Hashable | None]] = {}
        in_flight: dict[Hashable, Future] = {}
        lookups = hits = 0
        groups: dict[int, list[Trajectory]] = {}
        for trajectory in trajectories:
            groups.setdefault(trajectory.group_id, []).append(trajectory)
        for component in (c for c in self.components if c.group):
            for group in groups.values():
                index = len(calls)
                future = self._pool.submit(timed_group_call, index, component.fn, tasks[group[0].task_id], group)
                calls[future] = (group, component, index, None)
        for component in (c for c in self.components if is_batched(c)):
            # One call for the whole batch (e.g. a reward model's padded forward), not one per sample.
            index = len(calls)
            batch_tasks = [tasks[t.task_id] for t in trajectories]
            future = self._pool.submit(timed_group_call, index, component.fn, batch_tasks, list(trajectories))
            calls[future] = (list(trajectories), component, index, None)
        for trajectory in trajectories:
            for component in (c for c in self.components if not c.group and not is_batched(c)):
                key = self._cache_key(component, trajectory)
                if key is not None:
                    lookups += 1
                    if key in self._cache:
                        hits += 1
                        self._cache.move_to_end(key)
                        trajectory.rewards[component.name] = self._cache[key]
                        continue
                    if key in in_flight:
                        hits += 1
                        calls[in_flight[key]][0].append(trajectory)
                        continue
                index = len(calls)
                future = self._pool.submit(timed_call, index, component.fn, tasks[trajectory.task_id], trajectory)
                calls[future] = ([trajectory], component, index, key)
                if key is not None:
                    in_flight[key] = future

        first_traceback: str | None = None
        pending, last_progress, timed_out = set(calls), time.monotonic(), False
        while pending:
            done, pending = wait(pending, timeout=0.05, return_when=FIRST_COMPLETED)
            now = time.monotonic()
            if done:
                last_progress = now
            for future in done:
                sharing, component, _, key = calls[future]
                try:
                    value = future.result()
                except Exception as err:  # noqa: BLE001 - any reward error is recorded, not raised
                    for trajectory in sharing:
                        trajectory.rewards[component.name] = self.fallback
                        trajectory.errors.append(f"reward {component.name}: {type(err).__name__}: {err}")
                    first_traceback = first_traceback or "".join(traceback.format_exception(err))
                else:
                    self._remember(key, value)
                    values = value if isinstance(value, list) else [value] * len(sharing)
                    for trajectory, v in zip(sharing, values):
                        trajectory.rewards[component.name] = v
            # A call running past its timeout, or a pool that stopped making progress (all
            # workers stuck), is given up on: its sample scores `fallback` with a timeout error.
            stalled = now - last_progress > self.timeout_s
            for future in list(pending):
                start = started.get(calls[future][2])
                if stalled or (start is not None and now - start > self.timeout_s):
                    pending.discard(future)
                    timed_out = True
                    sharing, component, _, _ = calls[future]
                    message = f"reward {component.name}: timed out after {self.timeout_s:g} s"
                    for trajectory in sharing:
                        trajectory.rewards[component.name] = self.fallback
                        trajectory.errors.append(message)
                    first_traceback = first_traceback or message
        if timed_out:
            # Hung threads cannot be killed; abandon that pool so later batches get fresh workers.
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="reward")

        for trajectory in trajectories:
            trajectory.reward = combine(trajectory.rewards, self._weights, self.combine_mode, self.gates, self.clip)
        failed = sum(1 for t in trajectories if any(e.startswith("reward ") for e in t.errors))
        if trajectories and failed / len(trajectories) > self.max_error_fraction:
            raise RewardFailure(
                f"{failed}/{len(trajectories)} samples of this batch failed in a reward function "
                f"(reward.max_error_fraction={self.max_error_fraction}). First error:\n{first_traceback}"
            )
        metrics = self._metrics(trajectories, failed)
        metrics["reward_cache_hit_frac"] = hits / lookups if lookups else 0.0
        metrics["reward_seconds"] = time.monotonic() - score_started
        return metrics

    def _metrics(self, trajectories: list[Trajectory], failed: int) -> dict[str, float]:
        totals = [t.reward for t in trajectories]
        metrics = {"reward": statistics.fmean(totals), "reward_errors": float(failed)}
        for component in self.components:
            values = [t.rewards[component.name] for t in trajectories]
            metrics[f"reward/{component.name}/mean"] = statistics.fmean(values)
            metrics[f"reward/{component.name}/std"] = statistics.pstdev(values)
            metrics[f"reward/{component.name}/frac_nonzero"] = sum(v != 0 for v in values) / len(values)
            alias = getattr(component.fn, "mean_metric", None)
            if alias:
                metrics[f"reward/{component.name}/{alias}"] = metrics[f"reward/{component.name}/mean"]
        return metrics
