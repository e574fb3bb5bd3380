"""Reward functions that misbehave, at module level so reward worker processes can import them
(the scorer sends a picklable function by reference; the workers get the test's sys.path)."""

from __future__ import annotations

import os
import time

from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

# Matching it takes exponential time in the text's length while holding the GIL: 12 characters
# take ~25 s, 30 never end. A JSONL task's `regex` verifier can carry such a pattern.
CATASTROPHIC_PATTERN = r"(.*.*.*)*Z"


def sleeps_forever_on_hang(task: Task, trajectory: Trajectory) -> float:
    if trajectory.response_text == "hang":
        while True:
            time.sleep(3600)
    return 1.0


def length_or_crash(task: Task, trajectory: Trajectory) -> float:
    """Kills its own process (as a segfault in native code would) on responses saying 'crash'."""
    if trajectory.response_text == "crash":
        os._exit(3)
    if trajectory.response_text == "raise":
        raise ValueError("this reward refuses the word 'raise'")
    return float(len(trajectory.response_text))


def holds_the_gil(task: Task, trajectory: Trajectory) -> float:
    import re

    return 1.0 if re.fullmatch(CATASTROPHIC_PATTERN, "y" * 30) else 0.0
