"""A task source of our own: short word problems about adding and taking away.

Named in the recipe by module path, `task.source: "word_problems:load"` (reinforge imports it with
the recipe's directory on the path, so no install is needed). reinforge calls `load(cfg, seed)`
with the recipe's `task` section: `cfg.train_size` and `cfg.eval_size` come from there, and this
source's own knobs from `task.params` (`max_number`, default 20).

It returns plain `Task`s; reinforge holds `task.eval_size` of them out for evaluation (with the
run's seed) and drops training tasks whose prompt is held out. Each task's `answer` is what the
`numeric` verifier and our partial-credit reward check; it is also the warm-up's target.
"""

from __future__ import annotations

import random

from reinforge.tasks.task import Task

NAMES = ["Ana", "Ben", "Mia", "Leo", "Zoe", "Sam"]
THINGS = ["apples", "books", "coins", "shells", "stickers"]


def problem(rng: random.Random, max_number: int) -> tuple[str, int]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(1, max_number), rng.randint(1, max_number)
    if rng.random() < 0.5:
        return f"{name} has {a} {thing} and gets {b} more. How many {thing} now?", a + b
    a, b = max(a, b), min(a, b)
    return f"{name} has {a} {thing} and gives away {b}. How many {thing} now?", a - b


def load(cfg, seed: int) -> list[Task]:
    unknown = set(cfg.params) - {"max_number"}
    if unknown:
        raise ValueError(f"task.params: unknown keys {sorted(unknown)}; word_problems takes max_number")
    max_number = cfg.params.get("max_number", 20)
    if not isinstance(max_number, int) or max_number < 1:
        raise ValueError(f"task.params.max_number must be a positive integer, got {max_number!r}")
    rng = random.Random(seed)
    tasks = []
    for i in range(cfg.train_size + cfg.eval_size):
        text, answer = problem(rng, max_number)
        tasks.append(Task(id=f"wp-{i}", prompt=text, answer=str(answer), verifier="numeric"))
    return tasks
