"""Training-health monitors: per-step detectors on the metrics a run already logs.

Each detector is one small file: a docstring with its formula, thresholds and why the pattern
matters, and `check(history, settings, window) -> Reading | None` (None: nothing to watch yet,
or no metric to watch in this run). They read history only (reinforge.monitors.base) and import
nothing above them; the trainer runs them after each step, logs monitor/<name> (1 when firing)
and monitor/<name>/value, and takes monitor.action (reinforge.trainer.health).
"""

from __future__ import annotations

from reinforge.monitors import (
    clip_spike,
    entropy_collapse,
    format_hacking,
    kl_blowup,
    logprob_gap_blowup,
    mode_collapse,
    response_length,
    reward_hacking,
    zero_variance,
)
from reinforge.monitors.base import History, Reading

# name -> module; each name is also the detector's sub-section of the `monitor` config.
DETECTORS = {
    module.NAME: module
    for module in (
        entropy_collapse, kl_blowup, logprob_gap_blowup, clip_spike, response_length,
        reward_hacking, format_hacking, mode_collapse, zero_variance,
    )
}


def read_detectors(history: History, monitor_cfg, verifier: str | None = None) -> list[Reading]:
    """Every enabled detector's reading at the history's last step. `monitor_cfg` is the config's
    `monitor` section; `verifier` the reward component format_hacking compares against (resolved
    from the reward components by reinforge.monitors.format_hacking.verifier_component)."""
    if not monitor_cfg.enabled or not history.steps:
        return []
    readings = []
    for name, detector in DETECTORS.items():
        settings = getattr(monitor_cfg, name)
        if not settings.enabled:
            continue
        if name == format_hacking.NAME:
            settings = settings.model_copy(update={"verifier": verifier})
        reading = detector.check(history, settings, monitor_cfg.window)
        if reading is not None:
            readings.append(reading)
    return readings


__all__ = ["DETECTORS", "History", "Reading", "read_detectors"]
