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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

METHODS: tuple[str, ...] = ("call", "batch", "verify")


@dataclass
class RewardCall:
    component: str  # ignored by "verify"
    method: str
    args: tuple


def execute(fns: Mapping[str, Callable], call: RewardCall) -> float | list[float]:
    """Run `call` with the reward functions `fns` (by component name); floats out."""
    if call.method == "verify":
        from reinforge.rewards.verifiers import verify

        task, response = call.args
        return float(verify(task, response))
    fn = fns[call.component]
    if call.method == "batch":
        tasks, trajectories = call.args
        return _one_per_sample(fn.score_batch(tasks, trajectories), len(trajectories))
    if call.method == "call":
        task, item = call.args
        value = fn(task, item)
        return _one_per_sample(value, len(item)) if isinstance(item, list) else float(value)
    raise ValueError(f"unknown reward call method {call.method!r}; valid: {', '.join(METHODS)}")


def _one_per_sample(values: Any, expected: int) -> list[float]:
    values = [float(v) for v in values]
    if len(values) != expected:
        raise ValueError(f"reward returned {len(values)} scores for {expected} samples")
    return values
