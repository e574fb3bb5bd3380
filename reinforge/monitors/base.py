"""What a training-health detector reads (the run's metric history) and what it returns (a Reading).

A detector is a pure function of the history: the metrics every RL step logged so far (the same
dicts as the `rl` rows of metrics.jsonl) and the held-out evaluations. The history is what a
checkpoint restores (RLResult.steps / .evals), so a resumed run reads the same values and its
detectors fire at the same steps as the uninterrupted run's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class History:
    """steps[i] holds the metrics of RL step i + 1 (steps[-1] is the step just taken); evals are
    {"step": s, "accuracy": ..., ...}, step 0 (before RL) first."""

    steps: list[dict]
    evals: list[dict]

    @property
    def step(self) -> int:
        return len(self.steps)

    def values(self, key: str) -> list[float]:
        """The metric's values in step order, skipping steps that did not log it."""
        return [float(m[key]) for m in self.steps if isinstance(m.get(key), (int, float))]

    def values_between(self, key: str, first: int, last: int) -> list[float]:
        """The metric's values at RL steps first..last (inclusive; steps count from 1)."""
        return [float(m[key]) for m in self.steps[max(first, 1) - 1 : max(last, 0)] if isinstance(m.get(key), (int, float))]


@dataclass(frozen=True)
class Reading:
    """One detector at one step: the value it watched, whether it fired and, if so, one line that
    says what happened, the value against its threshold and what to try."""

    name: str
    value: float
    fired: bool
    message: str = ""


def mean(values: list[float]) -> float:
    return statistics.fmean(values)


def spike(values: list[float], window: int, max_value: float, spike_factor: float, min_value: float) -> tuple[bool, str] | None:
    """The blow-up test shared by KL, log-prob gap and clip fraction: the latest value exceeds a
    ceiling, or exceeds `min_value` and `spike_factor` x the median of the `window` values before
    it. Returns (fired, why) or None without a value; the spike test needs `window` earlier values."""
    if not values:
        return None
    latest = values[-1]
    if latest > max_value:
        return True, f"above the ceiling {max_value:g}"
    earlier = values[-window - 1 : -1]
    if len(earlier) < window or latest <= min_value:
        return False, ""
    median = statistics.median(earlier)
    if latest <= spike_factor * median:
        return False, ""
    if median == 0:
        return True, f"up from a median of 0 over the previous {window} steps (above the floor {min_value:g})"
    return True, f"{latest / median:.3g}x its median {median:.3g} over the previous {window} steps (threshold {spike_factor:g}x, above the floor {min_value:g})"


def spike_reading(history: History, key: str, name: str, settings, window: int, describe) -> Reading | None:
    """A detector that watches metric `key` with `spike` and `settings` (max_value, spike_factor,
    min_value): None when this step did not log it; `describe(value, why)` words a firing."""
    values = history.values(key)
    if not values or key not in history.steps[-1]:
        return None
    fired, why = spike(values, window, settings.max_value, settings.spike_factor, settings.min_value)
    return Reading(name, values[-1], fired, describe(values[-1], why) if fired else "")
