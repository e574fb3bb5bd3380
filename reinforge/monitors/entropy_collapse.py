"""Entropy collapse: the policy's token entropy falls toward zero and it stops exploring.

    value = mean(entropy over the last W steps) / mean(entropy over the run's first W steps)
    fires when value < monitor.entropy_collapse.min_ratio          (W = monitor.window)

Reads `entropy` (mean nats per sampled token, logged by the learner every step). Collapsed
entropy is the usual precursor of a stalled run (Cui et al. 2025, "The Entropy Mechanism of
Reinforcement Learning for Reasoning Language Models", arXiv 2505.22617): once the policy puts
nearly all mass on one continuation, groups stop differing and the gradient vanishes. On a task
with one short right answer a converged policy looks the same, which is why the threshold is
relative and low. Needs 2W steps (the two windows do not overlap).
"""

from __future__ import annotations

from reinforge.monitors.base import History, Reading, mean

NAME = "entropy_collapse"
ADVICE = "try a higher rollout.temperature, algo.entropy_coef > 0, clip-higher (algo.clip_eps_high, e.g. 0.28) or a lower algo.lr"


def check(history: History, settings, window: int) -> Reading | None:
    values = history.values("entropy")
    if len(values) < 2 * window:
        return None
    start, recent = mean(values[:window]), mean(values[-window:])
    if start <= 0:
        return None  # nothing to fall from
    ratio = recent / start
    fired = ratio < settings.min_ratio
    message = (
        f"entropy collapse: policy entropy over the last {window} steps is {recent:.3g} nats/token, {ratio:.3g}x its "
        f"{start:.3g} over the first {window} (threshold {settings.min_ratio:g}x); {ADVICE}"
    ) if fired else ""
    return Reading(NAME, ratio, fired, message)
