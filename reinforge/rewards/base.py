"""The RewardFn protocol: (task, trajectory) -> score."""

from __future__ import annotations

from typing import Protocol

from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


class RewardFn(Protocol):
    def __call__(self, task: Task, trajectory: Trajectory) -> float: ...
