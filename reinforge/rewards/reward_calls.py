"""One reward call as plain data, and how it is executed: the same code in a worker process and in
an in-process thread, so both paths score alike.

A call names its component (the scorer's name for a reward part) and a method:

- `call`:   fn(task, item), item a trajectory (per-sample) or a list of them (group reward);
- `batch`:  fn.score_batch(tasks, trajectories), one call for a whole batch (a reward model);
- `verify`: the task's own verifier on a response text (evaluation), no component needed.

Only names and plain data (Task, Trajectory: dataclasses of str / int / float / list / dict) travel
to a worker process; the reward functions are built there from their (fn, params) spec.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reinforge.rewards.call_errors import RewardNotANumber

METHODS: tuple[str, ...] = ("call", "batch", "verify")


@dataclass
class RewardCall:
    component: str  # ignored by "verify"
    method: str
    args: tuple


def execute(fns: Mapping[str, Callable], call: RewardCall) -> float | list[float]:
    """Run `call` with the reward functions `fns` (by component name); floats out."""
    if call.method == "verify":
        from reinforge.tasks.verifiers import verify

        task, response = call.args
        return as_score(verify(task, response), "the verifier")
    fn = fns[call.component]
    if call.method == "batch":
        tasks, trajectories = call.args
        return _one_per_sample(fn.score_batch(tasks, trajectories), len(trajectories))
    if call.method == "call":
        task, item = call.args
        value = fn(task, item)
        return _one_per_sample(value, len(item)) if isinstance(item, list) else as_score(value, "it")
    raise ValueError(f"unknown reward call method {call.method!r}; valid: {', '.join(METHODS)}")


def _one_per_sample(values: Any, expected: int) -> list[float]:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise RewardNotANumber(f"it returned {_shown(values)} where one score per sample (a list of {expected}) is expected")
    values = [as_score(v, f"its score {i}") for i, v in enumerate(values)]
    if len(values) != expected:
        raise ValueError(f"reward returned {len(values)} scores for {expected} samples")
    return values


def as_score(value: Any, what: str) -> float:
    """`value` as a float; RewardNotANumber (a counted failure) for None, a string, nan or inf.
    A bool, a numpy number or a 0-d tensor is a number."""
    if isinstance(value, (str, bytes)) or value is None:
        raise RewardNotANumber(f"{what} returned {_shown(value)}, not a number")
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise RewardNotANumber(f"{what} returned {_shown(value)}, not a number") from None
    if not math.isfinite(score):
        raise RewardNotANumber(f"{what} returned {score}, not a finite number")
    return score


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"
