"""Turn-level credit assignment: discounted returns over turns with a turn-level leave-one-out baseline."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


def turn_returns(turn_rewards: torch.Tensor, counts: torch.Tensor, outcome: torch.Tensor, gamma: float) -> torch.Tensor:
    """G[i, k] = sum_{j=k}^{n_i-1} gamma^(j-k) R[i, j], with R[i, j] the turn reward plus, on the
    last turn n_i - 1, the episode's outcome reward. Zero for k >= n_i. Shape [N, K]."""
    n, k_max = turn_rewards.shape
    rewards = turn_rewards.double().clone()
    rewards[torch.arange(n), counts - 1] += outcome.double()
    returns = torch.zeros_like(rewards)
    running = torch.zeros(n, dtype=torch.float64)
    for k in reversed(range(k_max)):
        running = torch.where(k < counts, rewards[:, k] + gamma * running, torch.zeros_like(running))
        returns[:, k] = running
    return returns


@register_advantage("turn_rloo", min_group_size=2, turn_level=True)
def turn_level_leave_one_out(inputs: AdvantageInputs) -> AdvantageOutput:
    """Per-token advantages [N, T] from turn-level returns and a turn-level leave-one-out baseline:

        R_{i,k} = r_{i,k} + [k = n_i - 1] * R_i                (turn reward; outcome on the last turn)
        G_{i,k} = sum_{j >= k} gamma^(j-k) R_{i,j}             (discounted return from turn k)
        b_{i,k} = 1/(m-1) sum_{j in g(i), j != i} G_{j, min(k, n_j - 1)}
        A_{i,t} = G_{i,k(t)} - b_{i,k(t)}   for every token t of turn k(t)

    Every token of turn k shares that turn's advantage, so a turn is credited with what followed
    it, not with what came before (a bad final answer does not blame a good tool call as much as
    the episode-level estimators do when turn rewards differ). The baseline of turn k is the mean
    return-to-go of the other m-1 episodes of the group at their turn k, or at their last turn
    when they ended earlier; leaving the episode itself out keeps the estimate unbiased (the RLOO
    argument, Kool et al. 2019, applied per turn). With one turn per episode and no turn rewards
    this is exactly `rloo`.

    Sources: turn-level advantage estimation for multi-turn tool use, Zeng et al., "Reinforcing
    Multi-Turn Reasoning in LLM Agents via Turn-Level Credit Assignment" (2025, arXiv:2505.11821);
    the leave-one-out baseline, Ahmadian et al. (2024) and Kool et al. (2019). The issue that asked
    for it names it TRLOO (turn-level REINFORCE leave-one-out).
    """
    if inputs.turn_index is None or inputs.turn_counts is None:
        raise ValueError("turn_rloo needs turn_index and turn_counts (multi-turn trajectories)")
    counts = inputs.turn_counts.long()
    if (counts < 1).any():
        raise ValueError("turn_rloo: every episode needs at least one policy turn")
    k_max = int(counts.max())
    turn_rewards = inputs.turn_rewards if inputs.turn_rewards is not None else torch.zeros(len(counts), k_max)
    returns = turn_returns(turn_rewards[:, :k_max], counts, inputs.rewards, inputs.gamma)

    # G_{j, min(k, n_j - 1)}: each episode's return-to-go at turn k, held at its last turn after it ended.
    k = torch.arange(k_max)
    held = returns.gather(1, torch.minimum(k[None, :], counts[:, None] - 1))
    groups = inputs.group_ids
    same = groups[:, None] == groups[None, :]
    sizes = same.sum(1)
    if (sizes < 2).any():
        raise ValueError("turn_rloo needs at least 2 episodes per group (rollout.group_size >= 2)")
    baseline = (same.double() @ held - held) / (sizes[:, None] - 1)
    turn_advantages = returns - baseline  # [N, K]

    index = inputs.turn_index.long()
    per_token = turn_advantages.gather(1, index.clamp(min=0))
    advantages = torch.where(inputs.mask & (index >= 0), per_token, torch.zeros_like(per_token))
    live = k[None, :] < counts[:, None]
    metrics = {
        "adv_mean": turn_advantages[live].mean().item(),
        "adv_std": turn_advantages[live].std().item() if live.sum() > 1 else 0.0,
        "turns_mean": counts.double().mean().item(),
        "turn_return_first": returns[:, 0].mean().item(),
    }
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=metrics)
