"""One seed per task, so that every episode of a GRPO group starts from the same problem.

A foreign env that makes its own problems (a secret number, a board, a sampled question) must
make the same one for all `rollout.group_size` episodes of a task, or the group baseline compares
different problems. The seed is the task's `metadata["seed"]` when it is an int, else a stable
hash of the task id (the same in every process, unlike Python's `hash`).

An env whose reset takes no seed draws from the global `random` / `numpy.random` generators; the
adapters then run its reset inside `seeded_global_rngs(seed)`, which seeds both and restores their
previous state afterwards (resets run one at a time, in the rollout loop's thread).
"""

from __future__ import annotations

import contextlib
import random
import zlib
from collections.abc import Iterator

import numpy as np

from reinforge.tasks.task import Task


def task_seed(task: Task) -> int:
    seed = task.metadata.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        return seed
    return zlib.crc32(task.id.encode("utf-8"))


@contextlib.contextmanager
def seeded_global_rngs(seed: int) -> Iterator[None]:
    py_state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed % 2**32)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
