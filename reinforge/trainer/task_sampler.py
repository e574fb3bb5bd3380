"""Draws training tasks in seeded, shuffled epochs: every task once before any task twice."""

from __future__ import annotations

import random

from reinforge.tasks.task import Task


class TaskSampler:
    def __init__(self, tasks: list[Task], seed: int):
        if not tasks:
            raise ValueError("no training tasks to sample from")
        self.tasks = tasks
        self.rng = random.Random(seed)
        self.order: list[int] = []

    def next_batch(self, size: int) -> list[Task]:
        while len(self.order) < size:
            self.order += self.rng.sample(range(len(self.tasks)), len(self.tasks))
        batch, self.order = self.order[:size], self.order[size:]
        return [self.tasks[i] for i in batch]
