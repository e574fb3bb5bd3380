"""Mode collapse: the policy answers a prompt with the same tokens every time.

    value = mean(identical_response_group_frac over the last W steps)
    fires when value > monitor.mode_collapse.max_frac

`identical_response_group_frac` is the share of a step's groups whose responses are all the same
token sequence (reinforge.trainer.group_diversity; `duplicate_response_group_frac`, any two alike,
is logged beside it). Such a group has zero variance under any reward, so a group-relative
estimator learns nothing from it; when most groups are like this the run has stopped exploring
(Cui et al. 2025, arXiv 2505.22617). A policy that has simply solved its prompts looks the same:
then it has nothing left to learn from them either, and harder tasks are the way on.
"""

from __future__ import annotations

from reinforge.monitors.base import History, Reading, mean

NAME = "mode_collapse"
KEY = "identical_response_group_frac"
ADVICE = ("if the answers are right the policy has converged on these prompts (give it harder tasks); if not, raise "
          "rollout.temperature, add algo.entropy_coef or clip-higher (algo.clip_eps_high)")


def check(history: History, settings, window: int) -> Reading | None:
    values = history.values(KEY)
    if len(values) < window or KEY not in history.steps[-1]:
        return None
    share = mean(values[-window:])
    fired = share > settings.max_frac
    message = (
        f"mode collapse: in {share:.3g} of the groups (mean of the last {window} steps) every response is the same tokens "
        f"(threshold {settings.max_frac:g}); {ADVICE}"
    ) if fired else ""
    return Reading(NAME, share, fired, message)
