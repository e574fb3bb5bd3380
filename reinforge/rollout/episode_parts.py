"""Episodes that come as several trajectories: one reward and one advantage per episode.

An agent trained through the gateway (reinforge.gateway.env) may edit its history between model
calls; its episode then becomes several token-exact trajectories ("pieces"). They are one episode:
the reward is computed once, on the lead piece (`episode_part == 0`), and every other piece (1, 2,
..., listed right after its lead) gets a copy of it; the advantage estimator sees one row per
episode (the leads), and each piece is trained with its lead's advantage. Counting pieces as
episodes would weigh an episode by how often its agent rewrote history, and give a group-relative
baseline one sample per piece instead of one per episode.
"""

from __future__ import annotations

import copy

from reinforge.rollout.trajectory import Trajectory


class EpisodePartsError(ValueError):
    pass


def lead_rows(trajectories: list[Trajectory]) -> list[int]:
    """For each trajectory, the index of its episode's lead piece (itself for a lead)."""
    leads, current = [], None
    for i, trajectory in enumerate(trajectories):
        if trajectory.episode_part == 0:
            current = i
        elif current is None or trajectories[current].group_id != trajectory.group_id:
            raise EpisodePartsError(
                f"trajectory {i} (task {trajectory.task_id}) is piece {trajectory.episode_part} of an episode whose "
                "lead piece (episode_part 0) does not come before it in the batch"
            )
        leads.append(current)
    return leads


def has_pieces(trajectories: list[Trajectory]) -> bool:
    return any(t.episode_part for t in trajectories)


def share_lead_scores(trajectories: list[Trajectory]) -> None:
    """Give every non-lead piece its lead's reward, components, failures and reward errors."""
    for trajectory, lead in zip(trajectories, lead_rows(trajectories)):
        source = trajectories[lead]
        if source is trajectory:
            continue
        trajectory.rewards = dict(source.rewards)
        trajectory.reward = source.reward
        trajectory.reward_failures = dict(source.reward_failures)
        reward_errors = [e for e in source.errors if e.startswith("reward ")]
        trajectory.errors = [e for e in trajectory.errors if not e.startswith("reward ")] + copy.copy(reward_errors)


def count_episodes(trajectories: list[Trajectory]) -> int:
    return sum(1 for t in trajectories if t.episode_part == 0)


# The finish reason of an agent episode that produced no result: the agent raised, timed out,
# returned None or an unpicklable value (reinforge.gateway.agent_runner). Such an episode has no
# score; it is counted and left out of the loss (trainer.agent_failures), never scored as 0.
AGENT_ERROR = "agent_error"


def agent_failed(trajectory: Trajectory) -> bool:
    return trajectory.finish_reason == AGENT_ERROR
