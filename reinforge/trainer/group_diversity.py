"""How alike a group's responses are: the mode-collapse monitor's input (reinforge.monitors).

A group-relative estimator learns only from differences within a group. A policy that answers a
prompt the same way every time (token for token) has stopped exploring it: the group teaches
nothing, and when the answer is wrong nothing in the loss can move it. Two per-step metrics:

- `duplicate_response_group_frac`: the share of groups in which at least two responses are the
  same token sequence;
- `identical_response_group_frac`: the share of groups in which every response is the same.

Responses are compared on the tokens the policy sampled (loss-masked), never on decoded text, so
two answers that differ only in tokenization count as different (they are different samples).
A group is a task's `group_size` episodes; in a multi-player game each seat's trajectories form
their own group (`agent`), and an agent episode cut into parts is compared part by part.
"""

from __future__ import annotations

from collections import defaultdict

from reinforge.rollout.trajectory import Trajectory


def sampled_tokens(trajectory: Trajectory) -> tuple[int, ...]:
    return tuple(t for t, trained in zip(trajectory.token_ids, trajectory.loss_mask) if trained)


def group_diversity_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """The two shares above, over the groups with at least two responses (a lone response can
    repeat nothing); {} when there is no such group."""
    groups: dict[tuple, list[tuple[int, ...]]] = defaultdict(list)
    for t in trajectories:
        groups[(t.group_id, t.agent, t.episode_part)].append(sampled_tokens(t))
    sizes = [(len(responses), len(set(responses))) for responses in groups.values() if len(responses) > 1]
    if not sizes:
        return {}
    return {
        "duplicate_response_group_frac": sum(distinct < n for n, distinct in sizes) / len(sizes),
        "identical_response_group_frac": sum(distinct == 1 for _, distinct in sizes) / len(sizes),
    }
