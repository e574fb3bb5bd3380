"""Reward failures over a whole run, for the end-of-run summary and the report: how many samples
failed, in which component and why (timeout / raised / worker_died / not_a_number), and how many were left
out of the loss (reward.on_error=drop). Read from the per-step metrics the scorer and loop log:
`reward_errors`, `reward_failed/{component}/{reason}` and `reward_dropped`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable


def reward_failure_totals(steps: Iterable[dict]) -> dict:
    """Sums over steps; `causes` maps (component, reason) to a count of samples."""
    failed = dropped = 0.0
    causes: Counter = Counter()
    for metrics in steps:
        failed += metrics.get("reward_errors", 0.0)
        dropped += metrics.get("reward_dropped", 0.0)
        for key, value in metrics.items():
            if key.startswith("reward_failed/"):
                _, component, reason = key.split("/", 2)
                causes[(component, reason)] += value
    return {"failed": int(failed), "dropped": int(dropped), "causes": causes}


def describe_reward_failures(totals: dict) -> str:
    """'none', or '6 samples (slow: timeout 4; correct: raised 2); 8 left out of the loss'."""
    if not totals["failed"]:
        return "none"
    by_component: dict[str, list[str]] = {}
    for (component, reason), n in sorted(totals["causes"].items()):
        by_component.setdefault(component, []).append(f"{reason} {int(n)}")
    causes = "; ".join(f"{c}: {', '.join(parts)}" for c, parts in by_component.items())
    return f"{totals['failed']} samples ({causes}); {totals['dropped']} left out of the loss"
