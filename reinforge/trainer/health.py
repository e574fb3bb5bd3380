"""The training-health monitors in the RL loop: read the detectors, log them, say what fired, and
decide what the loop does about it (monitor.action).

After each step (and its evaluation, when there is one) every enabled detector of
reinforge.monitors reads the run's history. Its reading is logged (stage `health`) as
`monitor/<name>` (1.0 firing, 0.0 quiet) and `monitor/<name>/value` (what it watched), and kept in
the step's metrics, which checkpoints save: a resumed run knows what was already firing.

A detector acts once per episode of firing, at its onset (firing now, quiet or unread at the last
step it was read), so a condition that lasts does not print every step or write a checkpoint per
step. Then: `warn` prints one line; `checkpoint` also writes a checkpoint; `stop` also ends the run
after this step, evaluated and checkpointed, with the reason (`monitor/stop` is logged as 1.0).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from reinforge.monitors import History, Reading, read_detectors
from reinforge.monitors.format_hacking import verifier_component

STAGE = "health"


@dataclass
class HealthVerdict:
    metrics: dict[str, float] = field(default_factory=dict)  # monitor/<name> and monitor/<name>/value
    onsets: list[Reading] = field(default_factory=list)  # the detectors that start firing at this step
    action: str | None = None  # monitor.action when something started firing, else None

    def stop_reason(self, step: int) -> str | None:
        """One line for the summary, the CLI and TrainResult (each detector's full message was printed)."""
        if self.action != "stop":
            return None
        names = ", ".join(r.name for r in self.onsets)
        return f"the training-health monitor {names} fired at RL step {step} (monitor.action=stop)"


def fired_before(steps: list[dict], name: str) -> bool:
    """Whether `name` was firing at the last earlier step that read it."""
    key = f"monitor/{name}"
    return next((bool(m[key]) for m in reversed(steps) if key in m), False)


class HealthMonitor:
    """The config's `monitor` section bound to the run's reward components."""

    def __init__(self, cfg) -> None:
        self.settings = cfg.monitor
        self.verifier = verifier_component(cfg.reward.components, cfg.monitor.format_hacking.verifier)

    def check(self, steps: list[dict], evals: list[dict]) -> HealthVerdict:
        """The readings after the last of `steps` (the step just taken, evaluated if due)."""
        readings = read_detectors(History(steps, evals), self.settings, self.verifier)
        verdict = HealthVerdict()
        for reading in readings:
            verdict.metrics[f"monitor/{reading.name}"] = float(reading.fired)
            verdict.metrics[f"monitor/{reading.name}/value"] = reading.value
            if reading.fired and not fired_before(steps[:-1], reading.name):
                verdict.onsets.append(reading)
        if verdict.onsets:
            verdict.action = self.settings.action
        if verdict.action == "stop":
            verdict.metrics["monitor/stop"] = 1.0
        return verdict


WHAT_NEXT = {
    "warn": "training continues (monitor.action=warn)",
    "checkpoint": "writing a checkpoint of this step (monitor.action=checkpoint)",
    "stop": "stopping after this step with a checkpoint (monitor.action=stop)",
}


def announce(step: int, verdict: HealthVerdict) -> None:
    """One line per detector that started firing: what, the value against its threshold, what to
    try, and what the run does now."""
    for reading in verdict.onsets:
        print(f"reinforge: WARNING: step {step}: {reading.message}; {WHAT_NEXT[verdict.action]}", file=sys.stderr, flush=True)
