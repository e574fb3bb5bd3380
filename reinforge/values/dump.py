"""DUMP's distribution-level curriculum: a UCB bandit over task distributions, by their learnability.

DUMP (Wang et al., "DUMP: Automated Distribution-Level Curriculum Learning for RL-based LLM
Post-training", 2025, arXiv:2504.09710). The learnability of a distribution d is the expected absolute
advantage of its samples, L(d) = E_{x~d} E_{o~pi(.|x)} |A(o)|, estimated over a sliding window of its
most recent groups. Each distribution's score is the upper confidence bound

    UCB(d) = L_hat(d) + c * sqrt(2 ln N / n_d)

with n_d the groups drawn from d so far and N = sum_d n_d, and distributions are sampled with
probabilities softmax(UCB / T). A distribution never drawn has an infinite bound: while any is left,
the draw is uniform over those.

Here a distribution is the set of tasks sharing one value of a metadata key (prompt_value.dump_key;
arithmetic tasks: `family`, or `digits` with mixed digit counts).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict, deque

import torch

from reinforge.tasks.task import Task


def distribution_name(task: Task, key: str) -> str:
    if key not in task.metadata:
        raise ValueError(f"task {task.id} has no metadata key {key!r} (prompt_value.dump_key); its keys: {sorted(task.metadata)}")
    return str(task.metadata[key])


def tasks_by_distribution(tasks: list[Task], key: str) -> dict[str, list[Task]]:
    """The tasks of each distribution, in their order, distributions by name."""
    grouped: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        grouped[distribution_name(task, key)].append(task)
    return {name: grouped[name] for name in sorted(grouped)}


def ucb_scores(learnability: list[float], counts: list[int], c: float) -> list[float]:
    """UCB(d) = L(d) + c sqrt(2 ln N / n_d); math.inf where n_d = 0."""
    total = sum(counts)
    return [
        math.inf if n == 0 else value + c * math.sqrt(2.0 * math.log(total) / n)
        for value, n in zip(learnability, counts)
    ]


def sampling_probabilities(scores: list[float], temperature: float) -> list[float]:
    """softmax(scores / T); uniform over the infinite scores (unvisited distributions) when there are any."""
    unvisited = [math.isinf(s) for s in scores]
    if any(unvisited):
        return [1.0 / sum(unvisited) if u else 0.0 for u in unvisited]
    return torch.softmax(torch.tensor(scores, dtype=torch.float64) / temperature, 0).tolist()


class DistributionBandit:
    """Sliding-window learnability and draw counts per distribution; draws with its own seeded RNG."""

    def __init__(self, names: list[str], c: float, window: int, temperature: float, seed: int):
        self.names = names
        self.c, self.temperature = c, temperature
        self.windows: dict[str, deque[float]] = {name: deque(maxlen=window) for name in names}
        self.counts = dict.fromkeys(names, 0)
        self.rng = random.Random(seed)

    def learnability(self, windows: dict[str, list[float]] | None = None) -> list[float]:
        windows = self.windows if windows is None else windows
        return [sum(w) / len(w) if w else 0.0 for w in (windows[name] for name in self.names)]

    def probabilities(self, windows: dict[str, list[float]] | None = None) -> list[float]:
        return sampling_probabilities(ucb_scores(self.learnability(windows), list(self.counts.values()), self.c), self.temperature)

    def windows_copy(self) -> dict[str, list[float]]:
        """The learnability windows as they are now, for draws made while `observe` goes on (the async producer)."""
        return {name: list(w) for name, w in self.windows.items()}

    def draw(self, size: int, windows: dict[str, list[float]] | None = None) -> list[str]:
        """The distribution of each of `size` prompts (by `windows`, a copy, when given). Counts grow as
        prompts are drawn, so a batch spreads over the unvisited distributions instead of taking one of
        them `size` times."""
        chosen = []
        for _ in range(size):
            name = self.rng.choices(self.names, weights=self.probabilities(windows))[0]
            self.counts[name] += 1
            chosen.append(name)
        return chosen

    def observe(self, name: str, mean_abs_advantage: float) -> None:
        self.windows[name].append(mean_abs_advantage)

    def state_dict(self) -> dict:
        return {"windows": {k: list(w) for k, w in self.windows.items()}, "counts": dict(self.counts), "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        if sorted(state["counts"]) != sorted(self.names):
            raise ValueError(f"DUMP state is for distributions {sorted(state['counts'])}, this run has {sorted(self.names)}")
        for name, values in state["windows"].items():
            self.windows[name].clear()
            self.windows[name].extend(values)
        self.counts = dict(state["counts"])
        self.rng.setstate(state["rng"])
