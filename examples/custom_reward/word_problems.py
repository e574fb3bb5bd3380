"""A task source of our own: short word problems about adding and taking away.

Named in the recipe by module path, `task.source: "word_problems:load"` (reinforge imports it with
the recipe's directory on the path, so no install is needed). reinforge calls `load(cfg, seed)`
with the recipe's `task` section: `cfg.train_size` and `cfg.eval_size` come from there, and this
source's own knobs from `task.params`: `max_number` (default 9), and `teacher_slips` (default 0.6),
the fraction of "gives away" problems whose worked answer, the warm-up's target, is one too many.

It returns plain `Task`s; reinforge holds `task.eval_size` of them out for evaluation (with the
run's seed) and drops training tasks whose prompt is held out. Each task's `answer` is what the
`numeric` verifier and our partial-credit reward check; its `demonstration` is the teacher's answer.
The teacher's slips leave the warm start answering many take-away problems one too many: close,
which the partial-credit reward pays for in part, but not right, which RL is there to fix.
"""

from __future__ import annotations

import random

from reinforge.tasks.task import Task

NAMES = ["Ana", "Ben", "Mia", "Leo", "Zoe", "Sam"]
THINGS = ["apples", "books", "coins", "shells", "stickers"]


def problem(rng: random.Random, max_number: int) -> tuple[str, int, bool]:
    """(text, answer, is_take_away)."""
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(1, max_number), rng.randint(1, max_number)
    if rng.random() < 0.5:
        return f"{name} has {a} {thing} and gets {b} more. How many {thing} now?", a + b, False
    a, b = max(a, b), min(a, b)
    return f"{name} has {a} {thing} and gives away {b}. How many {thing} now?", a - b, True


def load(cfg, seed: int) -> list[Task]:
    unknown = set(cfg.params) - {"max_number", "teacher_slips"}
    if unknown:
        raise ValueError(f"task.params: unknown keys {sorted(unknown)}; word_problems takes max_number, teacher_slips")
    max_number = cfg.params.get("max_number", 9)
    slips = cfg.params.get("teacher_slips", 0.6)
    if not isinstance(max_number, int) or max_number < 1:
        raise ValueError(f"task.params.max_number must be a positive integer, got {max_number!r}")
    if not 0.0 <= slips <= 1.0:
        raise ValueError(f"task.params.teacher_slips is a fraction in [0, 1], got {slips!r}")
    rng = random.Random(seed)
    tasks = []
    for i in range(cfg.train_size + cfg.eval_size):
        text, answer, take_away = problem(rng, max_number)
        shown = answer + 1 if take_away and rng.random() < slips else answer
        tasks.append(Task(id=f"wp-{i}", prompt=text, answer=str(answer), verifier="numeric", demonstration=str(shown)))
    return tasks
