"""Scores trajectories with several named reward components, each call under a timeout.

Where the calls run (`isolation`): "process" (default) runs them in worker processes
(`reinforge.rewards.process_pool`) that a timeout kills, so a hung or GIL-holding reward cannot
hang the run; only names, params and plain data cross to the workers. Stateful components (their
state is checkpointed with the run) and components that say `in_process = True` (a reward model's
forward) run in daemon threads here (`reinforge.rewards.thread_pool`), as does everything with
`isolation="thread"`.

A component call that fails is recorded on the sample (`trajectory.errors`, and
`trajectory.reward_failures[component] = reason`) and counted per component and reason (timeout,
raised, worker_died: `reinforge.rewards.call_errors`); the component scores `fallback` there. With
`on_error="drop"` (default) the trainer leaves such samples out of the loss
(`reinforge.trainer.reward_failures`) and the reward metrics leave them out too; with "fallback"
they are trained on with that score. When more than `max_error_fraction` of a batch's samples
have an error, the run stops with a count per component and reason and the first traceback: one
bad sample never kills a run, a broken reward function always does, quickly and with its message.

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

import pickle
import statistics
import time
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from reinforge.rewards.base import RewardFn
from reinforge.rewards.call_errors import FAILURE_REASONS, RewardCallError, failure_reason
from reinforge.rewards.combine import CombineMode, GateLike, combine
from reinforge.rewards.group import GroupRewardFn
from reinforge.rewards.process_pool import ProcessCallPool, unsendable
from reinforge.rewards.reward_calls import RewardCall
from reinforge.rewards.thread_pool import ThreadCallPool
from reinforge.rollout.episode_parts import agent_failed, share_lead_scores
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


class RewardFailure(RuntimeError):
    pass


@dataclass
class NamedReward:
    """A named part of the reward. A `group` part is called once per group (all responses to one
    task: majority vote, pairwise preference, tournament) and returns one score per response.
    `spec` = (fn name, params) lets a reward worker process build the same function by name;
    without it the function object itself is sent to the workers (pickled)."""

    name: str
    fn: RewardFn | GroupRewardFn
    weight: float
    group: bool = False
    spec: tuple[str, dict[str, Any]] | None = None


def is_batched(component: NamedReward) -> bool:
    """A per-sample reward that can also score a whole batch in one call (`score_batch`)."""
    return not component.group and callable(getattr(component.fn, "score_batch", None))


Isolation = Literal["process", "thread"]
OnError = Literal["drop", "fallback"]


def runs_in_process(component: NamedReward) -> bool:
    """Stays in the trainer's process: a stateful reward (one state, checkpointed with the run) or
    one that asks to (`in_process = True`: a reward model, whose weights one copy should hold)."""
    return hasattr(component.fn, "state_dict") or bool(getattr(component.fn, "in_process", False))


def worker_spec(component: NamedReward) -> tuple:
    """What a worker process builds this component from: its name and params, else the pickled
    object; a clear error when it can be neither."""
    if component.spec is not None:
        return ("named", component.spec[0], dict(component.spec[1]))
    try:
        return ("pickled", pickle.dumps(component.fn))
    except Exception as err:  # noqa: BLE001 - pickling raises many types
        raise ValueError(unsendable(f"reward component {component.name!r}", err)) from None


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
        isolation: Isolation = "process",
        on_error: OnError = "drop",
    ):
        if not components:
            raise ValueError("at least one reward component is needed")
        if isolation not in ("process", "thread"):
            raise ValueError(f"reward isolation must be 'process' or 'thread', got {isolation!r}")
        if on_error not in ("drop", "fallback"):
            raise ValueError(f"reward on_error must be 'drop' or 'fallback', got {on_error!r}")
        self.components = components
        self.timeout_s = timeout_s
        self.max_error_fraction = max_error_fraction
        self.workers = workers
        self.combine_mode = combine
        self.gates = list(gates)
        self.clip = clip
        self.fallback = float(fallback)
        self.isolation = isolation
        self.on_error = on_error
        self.cache_enabled = cache
        self.cache_size = cache_size
        self._cache: OrderedDict[Hashable, float] = OrderedDict()
        self._weights = {c.name: c.weight for c in components}
        names = set(self._weights)
        for gate in self.gates:
            for name in (gate.part, gate.requires):
                if name not in names:
                    raise ValueError(f"reward gate names unknown component {name!r}; components: {', '.join(sorted(names))}")
        self._in_worker = {
            c.name for c in components if isolation == "process" and not runs_in_process(c)
        }
        self._threads = ThreadCallPool({c.name: c.fn for c in components if c.name not in self._in_worker}, workers, timeout_s)
        self._processes = (
            ProcessCallPool({c.name: worker_spec(c) for c in components if c.name in self._in_worker}, workers, timeout_s)
            if isolation == "process" else None
        )

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
        """Stop the worker processes (idle threads end by themselves; hung ones are daemons)."""
        self._threads.close()
        if self._processes is not None:
            self._processes.close()

    def start(self) -> None:
        """Start the reward worker processes now and wait until they have built the reward
        functions: one that cannot (a user's module that does not import there) raises
        RewardWorkerStartError here, before training, instead of failing every call later."""
        if self._processes is not None and self._in_worker:
            self._processes.start()

    def worker_pids(self) -> list[int]:
        return self._processes.worker_pids() if self._processes is not None else []

    def _run(self, calls: list[RewardCall], in_worker: list[bool]) -> list:
        """Outcomes of `calls` in order, each run where its component runs."""
        outcomes: list = [None] * len(calls)
        for where, pool in ((True, self._processes), (False, self._threads)):
            picked = [i for i, w in enumerate(in_worker) if w is where]
            if picked:
                for i, outcome in zip(picked, pool.run([calls[i] for i in picked])):
                    outcomes[i] = outcome
        return outcomes

    def verify_responses(self, tasks: list[Task], responses: list[str]) -> list[float | RewardCallError]:
        """Each task's own verifier on a response (evaluation), under the same timeout and in the
        same place as the reward calls: a score, or the RewardCallError the call ended with."""
        calls = [RewardCall("", "verify", (task, response)) for task, response in zip(tasks, responses)]
        return self._run(calls, [self.isolation == "process"] * len(calls))

    def score(self, tasks: dict[str, Task], trajectories: list[Trajectory]) -> dict[str, float]:
        """Fill `rewards` and `reward` of each trajectory; return reward metrics. An episode that
        came as several pieces is scored once, on its lead piece, and an agent episode without a
        result is not scored at all (it leaves the loss: rollout.episode_parts)."""
        to_score = [t for t in trajectories if t.episode_part == 0 and not agent_failed(t)]
        if len(to_score) < len(trajectories):
            for trajectory in trajectories:
                trajectory.reward_failures = {}
            metrics = self.score(tasks, to_score)
            share_lead_scores(trajectories)
            return metrics
        score_started = time.monotonic()
        for trajectory in trajectories:
            trajectory.reward_failures = {}
        # One call per (trajectory, component), except that cached scores are reused and
        # trajectories sharing a cache key within the batch share one call.
        calls: list[RewardCall] = []
        owners: list[tuple[list[Trajectory], NamedReward, Hashable | None]] = []
        in_flight: dict[Hashable, int] = {}
        lookups = hits = 0

        def add(call: RewardCall, sharing: list[Trajectory], component: NamedReward, key: Hashable | None) -> int:
            calls.append(call)
            owners.append((sharing, component, key))
            return len(calls) - 1

        groups: dict[int, list[Trajectory]] = {}
        for trajectory in trajectories:
            groups.setdefault(trajectory.group_id, []).append(trajectory)
        for component in (c for c in self.components if c.group):
            for group in groups.values():
                add(RewardCall(component.name, "call", (tasks[group[0].task_id], group)), group, component, None)
        for component in (c for c in self.components if is_batched(c)):
            # One call for the whole batch (e.g. a reward model's padded forward), not one per sample.
            batch_tasks = [tasks[t.task_id] for t in trajectories]
            add(RewardCall(component.name, "batch", (batch_tasks, list(trajectories))), list(trajectories), component, None)
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
                        owners[in_flight[key]][0].append(trajectory)
                        continue
                index = add(RewardCall(component.name, "call", (tasks[trajectory.task_id], trajectory)), [trajectory], component, key)
                if key is not None:
                    in_flight[key] = index

        outcomes = self._run(calls, [owner[1].name in self._in_worker for owner in owners])
        first_traceback: str | None = None
        for (sharing, component, key), outcome in zip(owners, outcomes):
            if isinstance(outcome, BaseException):
                reason = failure_reason(outcome)
                message = str(outcome)
                if not message.startswith(f"reward {component.name}:"):
                    message = f"reward {component.name}: {type(outcome).__name__}: {message}"
                for trajectory in sharing:
                    trajectory.rewards[component.name] = self.fallback
                    trajectory.reward_failures[component.name] = reason
                    trajectory.errors.append(message)
                first_traceback = first_traceback or getattr(outcome, "traceback_text", None) or message
                continue
            self._remember(key, outcome)
            values = outcome if isinstance(outcome, list) else [outcome] * len(sharing)
            for trajectory, v in zip(sharing, values):
                trajectory.rewards[component.name] = v

        for trajectory in trajectories:
            trajectory.reward = combine(trajectory.rewards, self._weights, self.combine_mode, self.gates, self.clip)
        failed = sum(1 for t in trajectories if t.reward_failures)
        if trajectories and failed / len(trajectories) > self.max_error_fraction:
            raise RewardFailure(
                f"{failed}/{len(trajectories)} samples of this batch failed in a reward function "
                f"(reward.max_error_fraction={self.max_error_fraction}): {describe_failures(trajectories)}. "
                f"First error:\n{first_traceback}"
            )
        metrics = self._metrics(trajectories, failed)
        metrics["reward_cache_hit_frac"] = hits / lookups if lookups else 0.0
        metrics["reward_seconds"] = time.monotonic() - score_started
        return metrics

    def _metrics(self, trajectories: list[Trajectory], failed: int) -> dict[str, float]:
        metrics: dict[str, float] = {"reward_errors": float(failed)}
        for (component, reason), count in failure_counts(trajectories).items():
            metrics[f"reward_failed/{component}/{reason}"] = float(count)
        # Dropped samples leave the loss, so they leave the reward curve too: it shows what is trained on.
        scored = [t for t in trajectories if not t.reward_failures] if self.on_error == "drop" else trajectories
        if not scored:
            return metrics | {"reward": float("nan")}
        metrics["reward"] = statistics.fmean(t.reward for t in scored)
        for component in self.components:
            values = [t.rewards[component.name] for t in scored]
            metrics[f"reward/{component.name}/mean"] = statistics.fmean(values)
            metrics[f"reward/{component.name}/std"] = statistics.pstdev(values)
            metrics[f"reward/{component.name}/frac_nonzero"] = sum(v != 0 for v in values) / len(values)
            alias = getattr(component.fn, "mean_metric", None)
            if alias:
                metrics[f"reward/{component.name}/{alias}"] = metrics[f"reward/{component.name}/mean"]
        return metrics


def failure_counts(trajectories: list[Trajectory]) -> Counter:
    """(component, reason) -> how many samples that component failed on for that reason."""
    return Counter((name, reason) for t in trajectories for name, reason in t.reward_failures.items())


def describe_failures(trajectories: list[Trajectory]) -> str:
    """'component 'slow' timed out on 4 samples; component 'x' raised on 1 sample'."""
    verbs = dict(zip(FAILURE_REASONS, ("timed out", "raised", "lost its worker process", "returned a non-number")))
    counts = failure_counts(trajectories)
    parts = [
        f"component {name!r} {verbs[reason]} on {n} sample{'s' if n != 1 else ''}"
        for (name, reason), n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
    return "; ".join(parts) or "no component failed"

