"""The built-in task family: integer addition, with a difficulty knob and an imperfect teacher.

`digits` sets the difficulty (operands drawn uniformly from [0, 10**digits)). Supervised warm-up
data comes from a teacher that forgets every carry in a fraction `1 - teacher_accuracy` of its
worked answers. A model imitating it learns the format and puts real probability on the right
answer, but its most likely answer on carry problems is the teacher's mistake, so greedy accuracy
after warm-up is low. Only a reward that checks the sum can separate the two, which is exactly
what RL with a verifier is for: this family is chosen so that RL visibly helps.
"""

from __future__ import annotations

import random
from typing import Any

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks.task import Task, TaskSplits

DEFAULTS: dict[str, Any] = {"digits": 2, "teacher_accuracy": 0.4}


def add_without_carry(a: int, b: int) -> int:
    """Digit-wise sum modulo 10: the teacher's systematic mistake."""
    result, place = 0, 1
    while a or b:
        result += ((a % 10 + b % 10) % 10) * place
        a, b, place = a // 10, b // 10, place * 10
    return result


def make_task(a: int, b: int, teacher_correct: bool) -> Task:
    answer = a + b
    shown = answer if teacher_correct else add_without_carry(a, b)
    has_carry = add_without_carry(a, b) != answer
    return Task(
        id=f"add-{a}-{b}",
        prompt=f"{a}+{b}=",
        answer=str(answer),
        verifier="numeric",
        demonstration=str(shown),
        # Family: carry problems are the ones the teacher gets wrong, so evaluation splits on them.
        metadata={"a": a, "b": b, "has_carry": has_carry, "family": "carry" if has_carry else "no_carry"},
    )


def _params(cfg: TaskConfig) -> dict[str, Any]:
    unknown = set(cfg.params) - set(DEFAULTS)
    if unknown:
        raise ConfigError(f"task.params: unknown arithmetic parameter(s) {sorted(unknown)}; valid: {sorted(DEFAULTS)}")
    params = {**DEFAULTS, **cfg.params}
    if not isinstance(params["digits"], int) or not 1 <= params["digits"] <= 9:
        raise ConfigError(f"task.params.digits must be an integer in 1..9, got {params['digits']!r}")
    if not 0.0 <= float(params["teacher_accuracy"]) <= 1.0:
        raise ConfigError(f"task.params.teacher_accuracy must be in [0, 1], got {params['teacher_accuracy']!r}")
    space = 10 ** (2 * params["digits"])
    if cfg.eval_size > space // 2:
        raise ConfigError(f"task.eval_size={cfg.eval_size} leaves too few training problems for digits={params['digits']}")
    return params


def check(cfg: TaskConfig) -> None:
    _params(cfg)


def load(cfg: TaskConfig, seed: int) -> TaskSplits:
    params = _params(cfg)
    rng = random.Random(seed)
    high = 10 ** params["digits"]

    held_out: set[tuple[int, int]] = set()
    while len(held_out) < cfg.eval_size:
        held_out.add((rng.randrange(high), rng.randrange(high)))
    eval_tasks = [make_task(a, b, teacher_correct=True) for a, b in sorted(held_out)]
    rng.shuffle(eval_tasks)

    # Training problems never include a held-out pair; repeats among them are harmless.
    train_tasks = []
    while len(train_tasks) < cfg.train_size:
        pair = (rng.randrange(high), rng.randrange(high))
        if pair not in held_out:
            train_tasks.append(make_task(*pair, teacher_correct=rng.random() < params["teacher_accuracy"]))
    return TaskSplits(train=train_tasks, eval=eval_tasks)
