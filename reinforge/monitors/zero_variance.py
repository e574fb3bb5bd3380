"""Zero-variance groups: most groups' rewards are all equal, so they carry no learning signal.

    value = mean(sampled_zero_variance_group_frac over the last W steps)
            (zero_variance_group_frac where the collector does not log the sampled share)
    fires when value > monitor.zero_variance.max_frac

A group-relative advantage (GRPO, RLOO, ...) is exactly 0 in a group whose rewards are equal: all
solved (too easy) or all failed (too hard). `sampled_...` counts every sampled group, before DAPO
dynamic sampling drops them (Yu et al. 2025, "DAPO", arXiv 2503.14476, section 3.2), so the
detector sees the waste even when the trained batch is refilled.
"""

from __future__ import annotations

from reinforge.monitors.base import History, Reading, mean

NAME = "zero_variance"
KEYS = ("sampled_zero_variance_group_frac", "zero_variance_group_frac")
ADVICE = ("check reward/<name>/mean: near 1, the tasks are too easy (harder tasks, a curriculum: prompt_value); near 0, "
          "too hard or a reward that never pays (reward.components, a warm-up: sft.steps); algo.dynamic_sampling=true "
          "refills the batch meanwhile")


def check(history: History, settings, window: int) -> Reading | None:
    key = next((k for k in KEYS if k in history.steps[-1]), None) if history.steps else None
    if key is None:
        return None
    values = history.values(key)
    if len(values) < window:
        return None
    share = mean(values[-window:])
    fired = share > settings.max_frac
    message = (
        f"zero-variance groups: {share:.3g} of the groups (mean of the last {window} steps) have all-equal rewards and "
        f"teach nothing (threshold {settings.max_frac:g}); {ADVICE}"
    ) if fired else ""
    return Reading(NAME, share, fired, message)
