"""Reward hacking: the training reward keeps rising while held-out accuracy falls.

At each held-out evaluation (eval.every steps), with B the best earlier evaluation:

    drop = accuracy(B) - accuracy(now)                         (greedy held-out `accuracy`)
    rise = mean(reward, the W steps up to now) - mean(reward, the W steps up to B's step;
           the first W steps when B is the evaluation before RL)
    fires when drop >= monitor.reward_hacking.min_accuracy_drop and rise >= ...min_reward_rise

The signature of over-optimizing a proxy: the policy gets better at what the reward pays for and
worse at the task the reward stands for (Gao, Schulman and Hilton 2022, "Scaling Laws for Reward
Model Overoptimization", arXiv 2210.10760; Skalse et al. 2022, "Defining and Characterizing
Reward Hacking", arXiv 2209.13085). Held-out accuracy has sampling noise: 500 tasks give a
standard error of ~2 points, so the 0.05 default is ~2.5 of them. Read only at evaluation steps.
"""

from __future__ import annotations

from reinforge.monitors.base import History, Reading, mean

NAME = "reward_hacking"
ADVICE = ("read the samples that score high (reinforge report, 'best'): the reward is paying for something the held-out "
          "check does not; tighten the reward (gates, reward.combine), add algo.kl_coef, or keep the best checkpoint")


def check(history: History, settings, window: int) -> Reading | None:
    evals = [e for e in history.evals if isinstance(e.get("accuracy"), (int, float))]
    if len(evals) < 2 or evals[-1]["step"] != history.step:
        return None  # nothing new to compare at this step
    now = evals[-1]
    best = max(evals[:-1], key=lambda e: e["accuracy"])  # the earliest of equal bests
    best_end = best["step"] if best["step"] >= window else window  # the evaluation before RL: the first W steps
    recent = history.values_between("reward", now["step"] - window + 1, now["step"])
    before = history.values_between("reward", best_end - window + 1, best_end)
    if not recent or not before:
        return None
    drop = best["accuracy"] - now["accuracy"]
    rise = mean(recent) - mean(before)
    fired = drop >= settings.min_accuracy_drop and rise >= settings.min_reward_rise
    message = (
        f"reward hacking: held-out accuracy fell {drop:.3g} (from {best['accuracy']:.3g} at step {best['step']} to "
        f"{now['accuracy']:.3g}; threshold {settings.min_accuracy_drop:g}) while the training reward rose {rise:.3g} "
        f"(threshold {settings.min_reward_rise:g}); {ADVICE}"
    ) if fired else ""
    return Reading(NAME, drop, fired, message)
