"""Response length running away or collapsing.

    value = mean(response_length over the last W steps) / mean(response_length over the first W)
    fires when value > monitor.response_length.max_ratio (running away)
            or value < monitor.response_length.min_ratio (collapsing)

Reads `response_length` (mean sampled tokens per episode). Length that keeps growing until
responses hit rollout.max_new_tokens often means the reward pays for length or the loss
aggregation favours long sequences (Liu et al. 2025, "Understanding R1-Zero-Like Training: A
Critical Perspective", arXiv 2503.20783: per-sequence normalization biases length); length that
collapses means answers are being cut to the shortest thing the reward accepts. Reasoning runs
do legitimately get longer: the default 4x leaves room for that. Needs 2W steps.
"""

from __future__ import annotations

from reinforge.monitors.base import History, Reading, mean

NAME = "response_length"
GROWING = "try algo.loss_agg=constant (Dr. GRPO), an overlong penalty (reward fn overlong), or check a reward that pays for length"
SHRINKING = "check a reward that pays for brevity (length penalty weights) or a format reward met by an empty answer"


def check(history: History, settings, window: int) -> Reading | None:
    values = history.values("response_length")
    if len(values) < 2 * window:
        return None
    start, recent = mean(values[:window]), mean(values[-window:])
    if start <= 0:
        return None
    ratio = recent / start
    if ratio > settings.max_ratio:
        message = (f"response length running away: {recent:.3g} tokens over the last {window} steps, {ratio:.3g}x the "
                   f"{start:.3g} of the first {window} (threshold {settings.max_ratio:g}x); {GROWING}")
    elif ratio < settings.min_ratio:
        message = (f"response length collapsing: {recent:.3g} tokens over the last {window} steps, {ratio:.3g}x the "
                   f"{start:.3g} of the first {window} (threshold {settings.min_ratio:g}x); {SHRINKING}")
    else:
        message = ""
    return Reading(NAME, ratio, bool(message), message)
