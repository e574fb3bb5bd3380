"""Dr. MAS: each agent's rewards standardized within that agent's own samples of the group."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, group_standardized, group_stats, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


def agent_group_keys(group_ids: torch.Tensor, agent_ids: torch.Tensor | None) -> torch.Tensor:
    """One key per (group, agent) pair: samples share a key when they share both."""
    if agent_ids is None:
        return group_ids
    if agent_ids.shape != group_ids.shape:
        raise ValueError(f"agent_ids must have group_ids' shape {tuple(group_ids.shape)}, got {tuple(agent_ids.shape)}")
    agents = int(agent_ids.max().item()) + 1 if agent_ids.numel() else 1
    return group_ids.long() * agents + agent_ids.long()


@register_advantage("dr_mas", min_group_size=2)
def agent_normalized_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """Agent-wise group normalization, one advantage per sample [N]:

        A_i = (r_i - mean_{j in g(i), a(j) = a(i)} r_j) / (std_{j in g(i), a(j) = a(i)} r_j + eps)

    where g(i) is the sample's group (one task's games) and a(i) its agent (the player / role
    whose turns the trajectory holds, `inputs.agent_ids`), with the unbiased (n-1) std as in
    grpo. Source: Feng, Zheng, He, Zhang, An, "Dr. MAS: Stable Reinforcement Learning for
    Multi-Agent LLM Systems" (arXiv 2602.08847, 2026): with one baseline over all agents
    (GRPO's), an agent whose rewards sit apart from the others' (in tic-tac-toe self-play, X wins
    more often than O) gets advantages biased by that offset and inflated gradient norms; each
    agent's own mean and std remove it. Without agent ids (a single-agent env) it is exactly grpo.
    Every (group, agent) needs at least 2 samples; one whose rewards are all equal gets exactly 0,
    counted in `zero_variance_group_frac` (over (group, agent) pairs).
    """
    keys = agent_group_keys(inputs.group_ids, inputs.agent_ids)
    stats = group_stats(inputs.rewards, keys, min_group_size=2, estimator="dr_mas (per group and agent)")
    advantages = group_standardized(inputs.rewards, stats, inputs.eps)
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=sample_metrics(advantages, stats))
