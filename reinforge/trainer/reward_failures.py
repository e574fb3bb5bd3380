"""Samples whose reward failed leave the loss (`reward.on_error: drop`, the default).

A sample whose reward call timed out, raised or lost its worker has no score: training on
`reward.fallback` in its place would teach the policy that whatever made the reward fail is bad
(a long answer that timed out a verifier is not a wrong answer). So it is dropped from the batch
before advantages are computed: it adds nothing to the loss or the gradients, and no made-up
score enters any baseline. For a group-relative estimator (min_group_size >= 2: grpo, rloo, ...)
its whole group goes, since the others' advantages are measured against it. The count is a
metric (`reward_dropped`), in the report and in the end-of-run summary. With `on_error: fallback`
the batch is left as it is (the scorer has put `reward.fallback` in the failed components).
"""

from __future__ import annotations

from reinforge.rollout.trajectory import Trajectory


def drop_failed_samples(
    trajectories: list[Trajectory], on_error: str, group_relative: bool
) -> tuple[list[Trajectory], dict[str, float]]:
    """The trajectories to train on, and `reward_dropped` (samples left out of the loss)."""
    if on_error == "fallback":
        return trajectories, {"reward_dropped": 0.0}
    if on_error != "drop":
        raise ValueError(f"reward.on_error must be 'drop' or 'fallback', got {on_error!r}")
    if group_relative:
        failed_groups = {t.group_id for t in trajectories if t.reward_failures}
        kept = [t for t in trajectories if t.group_id not in failed_groups]
    else:
        kept = [t for t in trajectories if not t.reward_failures]
    return kept, {"reward_dropped": float(len(trajectories) - len(kept))}
