"""Clip-fraction spikes: a large share of the update's tokens hit the PPO clip.

    value = clip_frac at this step (share of loss tokens whose ratio was clipped, both sides)
    fires when value > monitor.clip_spike.max_value, or when value > ...min_value and
    value > ...spike_factor x median(clip_frac over the previous W steps)

Reads `clip_frac` (ppo_clip, gspo, cispo and any loss that reports it; a loss without it leaves
this detector nothing to watch). With one epoch and one mini-batch the first update's ratio is
exactly 1 and nothing clips; a spike means later mini-batches or epochs moved the policy far
within one step (an update too large for the trust region) or the data is stale (async).
"""

from __future__ import annotations

from reinforge.monitors.base import History, Reading, spike_reading

NAME = "clip_spike"
ADVICE = "try a lower algo.lr, fewer algo.epochs or algo.mini_batches, or a lower trainer.max_staleness"


def check(history: History, settings, window: int) -> Reading | None:
    return spike_reading(history, "clip_frac", NAME, settings, window, lambda value, why: f"clip-fraction spike: {value:.3g} of the update's tokens were clipped, {why}; {ADVICE}")
