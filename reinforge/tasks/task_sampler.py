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

    def state_dict(self) -> dict:
        """The data cursor: what is left of the current epoch, and the RNG that shuffles the next."""
        return {"order": list(self.order), "rng": self.rng.getstate(), "num_tasks": len(self.tasks)}

    def load_state_dict(self, state: dict) -> None:
        if "base" in state:  # saved by a run with the prompt_value section (reinforge.values): its data cursor
            state = state["base"]
        if state["num_tasks"] != len(self.tasks):
            raise ValueError(f"sampler state is for {state['num_tasks']} tasks, this run has {len(self.tasks)}")
        self.order = list(state["order"])
        self.rng.setstate(state["rng"])
