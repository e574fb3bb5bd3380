"""Format hacking: one reward component rises while the verifier's falls.

Over two consecutive windows of W steps (previous, last), on each component's unweighted mean
`reward/<name>/mean`:

    fall = mean(verifier, previous) - mean(verifier, last)
    rise = max over the other components c of mean(c, last) - mean(c, previous)
    fires when fall >= monitor.format_hacking.min_fall and rise >= ...min_rise

The verifier is monitor.format_hacking.verifier, else the first component whose fn checks
correctness (verifier, code_tests, code_tests_difficulty); without one the detector is off. A
shaping reward (format, length, a judge's style score) that climbs while correctness drops is
the policy trading the task for the cheaper part of its reward: reward hacking within one
composite reward (Skalse et al. 2022, "Defining and Characterizing Reward Hacking", arXiv
2209.13085). Needs 2W steps.
"""

from __future__ import annotations

from reinforge.monitors.base import History, Reading, mean

NAME = "format_hacking"
CORRECTNESS_FNS = ("verifier", "code_tests", "code_tests_difficulty")
ADVICE = "lower the rising component's weight, gate it on correctness (reward.gates), or make it part of the verifier's check"


def verifier_component(components, chosen: str | None) -> str | None:
    """The component name to watch: `chosen`, else the first correctness check among the run's
    reward components (objects with .name and .fn), else None."""
    if chosen is not None:
        return chosen
    return next((c.name for c in components if c.fn in CORRECTNESS_FNS), None)


def check(history: History, settings, window: int) -> Reading | None:
    verifier = settings.verifier
    if verifier is None or len(history.steps) < 2 * window:
        return None
    previous, last = history.steps[-2 * window : -window], history.steps[-window:]

    def window_mean(rows: list[dict], name: str) -> float | None:
        values = [float(r[f"reward/{name}/mean"]) for r in rows if isinstance(r.get(f"reward/{name}/mean"), (int, float))]
        return mean(values) if values else None

    before, after = window_mean(previous, verifier), window_mean(last, verifier)
    if before is None or after is None:
        return None
    fall = before - after
    names = sorted({k.split("/")[1] for r in last for k in r if k.startswith("reward/") and k.endswith("/mean") and k.count("/") == 2})
    rises = {}
    for name in names:
        if name != verifier and (b := window_mean(previous, name)) is not None and (a := window_mean(last, name)) is not None:
            rises[name] = a - b
    if not rises:
        return Reading(NAME, fall, False)
    riser = max(rises, key=rises.get)
    fired = fall >= settings.min_fall and rises[riser] >= settings.min_rise
    message = (
        f"format hacking: reward component '{riser}' rose {rises[riser]:.3g} (threshold {settings.min_rise:g}) while the "
        f"verifier '{verifier}' fell {fall:.3g} (threshold {settings.min_fall:g}) over the last {window} steps vs the "
        f"{window} before; {ADVICE}"
    ) if fired else ""
    return Reading(NAME, fall, fired, message)
