"""Agent episodes without a result leave the loss, alone (not their whole group).

An agent trained through the gateway that raised, timed out, or returned None (finish reason
`agent_error`, rollout.episode_parts) has nothing to score: a reward of 0 would teach the policy
that whatever the agent's bug met was a wrong answer. The episode (all its pieces) is dropped
before advantages are computed. Unlike a failed reward call, which may have scored the rest of the
group on a broken basis, the other episodes of its group are sound: the group's baseline is made of
them. A group left with fewer episodes than the estimator needs (`min_group_size`: 2 for grpo,
rloo...) goes entirely. Counts: `agent_dropped` (episodes left out, those of dropped groups
included) and `agent_groups_dropped`.
"""

from __future__ import annotations

from collections import Counter

from reinforge.rollout.episode_parts import agent_failed, lead_rows
from reinforge.rollout.trajectory import Trajectory


def drop_failed_episodes(trajectories: list[Trajectory], min_group_size: int) -> tuple[list[Trajectory], dict[str, float]]:
    """The trajectories to train on, and the counts of what was left out."""
    leads = lead_rows(trajectories)
    failed = [agent_failed(trajectories[lead]) for lead in leads]
    if not any(failed):
        return trajectories, {"agent_dropped": 0.0, "agent_groups_dropped": 0.0}
    episodes = Counter(t.group_id for t, bad in zip(trajectories, failed) if t.episode_part == 0 and not bad)
    groups = {t.group_id for t in trajectories}
    too_small = {g for g in groups if episodes[g] < min_group_size}
    kept = [t for t, bad in zip(trajectories, failed) if not bad and t.group_id not in too_small]
    dropped = sum(1 for t in trajectories if t.episode_part == 0) - sum(1 for t in kept if t.episode_part == 0)
    return kept, {"agent_dropped": float(dropped), "agent_groups_dropped": float(len(too_small))}
