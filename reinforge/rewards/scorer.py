"""Scores trajectories with several named reward components, each call under a timeout.

A component that raises or exceeds its timeout gives 0 for that sample; the error is written on
the trajectory and counted. When more than `max_error_fraction` of a batch's samples have an
error, the run stops with the first traceback: one bad sample never kills a run, a broken reward
function always does, quickly and with its message.
"""

from __future__ import annotations

import statistics
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from reinforge.rewards.base import RewardFn
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


class RewardFailure(RuntimeError):
    pass


@dataclass
class NamedReward:
    name: str
    fn: RewardFn
    weight: float


class RewardScorer:
    def __init__(self, components: list[NamedReward], timeout_s: float = 10.0, max_error_fraction: float = 0.5, workers: int = 4):
        if not components:
            raise ValueError("at least one reward component is needed")
        self.components = components
        self.timeout_s = timeout_s
        self.max_error_fraction = max_error_fraction
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="reward")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def score(self, tasks: dict[str, Task], trajectories: list[Trajectory]) -> dict[str, float]:
        """Fill `rewards` and `reward` of each trajectory; return reward metrics."""
        started: dict[int, float] = {}  # call index -> when a worker picked it up

        def timed_call(index: int, fn: RewardFn, task: Task, trajectory: Trajectory) -> float:
            started[index] = time.monotonic()
            return float(fn(task, trajectory))

        calls: dict[Future, tuple[Trajectory, NamedReward, int]] = {}
        for trajectory in trajectories:
            for component in self.components:
                index = len(calls)
                future = self._pool.submit(timed_call, index, component.fn, tasks[trajectory.task_id], trajectory)
                calls[future] = (trajectory, component, index)

        first_traceback: str | None = None
        pending, last_progress, timed_out = set(calls), time.monotonic(), False
        while pending:
            done, pending = wait(pending, timeout=0.05, return_when=FIRST_COMPLETED)
            now = time.monotonic()
            if done:
                last_progress = now
            for future in done:
                trajectory, component, _ = calls[future]
                try:
                    trajectory.rewards[component.name] = future.result()
                except Exception as err:  # noqa: BLE001 - any reward error is recorded, not raised
                    trajectory.rewards[component.name] = 0.0
                    trajectory.errors.append(f"reward {component.name}: {type(err).__name__}: {err}")
                    first_traceback = first_traceback or "".join(traceback.format_exception(err))
            # A call running past its timeout, or a pool that stopped making progress (all
            # workers stuck), is given up on: its sample scores 0 with a timeout error.
            stalled = now - last_progress > self.timeout_s
            for future in list(pending):
                start = started.get(calls[future][2])
                if stalled or (start is not None and now - start > self.timeout_s):
                    pending.discard(future)
                    timed_out = True
                    trajectory, component, _ = calls[future]
                    trajectory.rewards[component.name] = 0.0
                    message = f"reward {component.name}: timed out after {self.timeout_s:g} s"
                    trajectory.errors.append(message)
                    first_traceback = first_traceback or message
        if timed_out:
            # Hung threads cannot be killed; abandon that pool so later batches get fresh workers.
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="reward")

        for trajectory in trajectories:
            trajectory.reward = sum(c.weight * trajectory.rewards[c.name] for c in self.components)
        failed = sum(1 for t in trajectories if any(e.startswith("reward ") for e in t.errors))
        if trajectories and failed / len(trajectories) > self.max_error_fraction:
            raise RewardFailure(
                f"{failed}/{len(trajectories)} samples of this batch failed in a reward function "
                f"(reward.max_error_fraction={self.max_error_fraction}). First error:\n{first_traceback}"
            )
        return self._metrics(trajectories, failed)

    def _metrics(self, trajectories: list[Trajectory], failed: int) -> dict[str, float]:
        totals = [t.reward for t in trajectories]
        metrics = {"reward": statistics.fmean(totals), "reward_errors": float(failed)}
        for component in self.components:
            values = [t.rewards[component.name] for t in trajectories]
            metrics[f"reward/{component.name}/mean"] = statistics.fmean(values)
            metrics[f"reward/{component.name}/std"] = statistics.pstdev(values)
            metrics[f"reward/{component.name}/frac_nonzero"] = sum(v != 0 for v in values) / len(values)
        return metrics
