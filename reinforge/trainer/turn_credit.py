"""Per-turn rewards of multi-turn episodes, shaped and laid out for the advantage estimators.

The env's per-turn (process) rewards first get the configured fix against reward hacking (Clip
or Delta, `reinforge.rewards.shaping`; or `potential`, which reads them as potentials Phi of the
state each turn reaches and pays gamma * Phi(s_k) - Phi(s_{k-1}), Phi(s_0) = 0), then G-RA
gating on the episode's outcome. Turn-level
estimators (turn_rloo) take them turn by turn; an estimator with a critic (gae) takes each at its
turn's last sampled token, as PPO for multi-turn agents does (SPA-RL's PPO on per-step progress
rewards), so the critic learns the per-turn returns; every other estimator gets their sum added to
the episode's reward, so a per-turn reward is never silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reinforge.config import AlgoConfig
from reinforge.rewards.shaping import (
    clip_process_rewards,
    delta_process_rewards,
    gated_step_rewards,
    potential_based_shaping,
)
from reinforge.rollout.trajectory import Trajectory

def potential_differences(scores: list[float], gamma: float) -> list[float]:
    return potential_based_shaping([0.0, *scores], gamma)


def shaped_turn_rewards(trajectory: Trajectory, algo: AlgoConfig) -> list[float]:
    """One reward per policy turn (zeros when the env gave none)."""
    rewards = list(trajectory.turn_rewards or [0.0] * trajectory.num_turns)
    fixes = {
        "none": lambda r: r,
        "clip": clip_process_rewards,
        "delta": delta_process_rewards,
        "potential": lambda r: potential_differences(r, algo.gamma),
    }
    rewards = fixes[algo.turn_reward_fix](rewards)
    if algo.turn_reward_gate is not None:
        rewards = gated_step_rewards(rewards, trajectory.reward, algo.turn_reward_gate)
    return [float(r) for r in rewards]


@dataclass
class TurnLayout:
    index: torch.Tensor  # [N, T-1] long: policy turn of the token each position predicts, -1 elsewhere
    rewards: torch.Tensor  # [N, K] float64, shaped per-turn rewards, zero-padded
    counts: torch.Tensor  # [N] long


def turn_layout(trajectories: list[Trajectory], width: int, algo: AlgoConfig) -> TurnLayout:
    """`width` is the batch's T-1: position t predicts token t+1 (see TrainingBatch)."""
    counts = torch.tensor([max(1, t.num_turns) for t in trajectories])
    rewards = torch.zeros(len(trajectories), int(counts.max()), dtype=torch.float64)
    index = torch.full((len(trajectories), width), -1, dtype=torch.long)
    for row, t in enumerate(trajectories):
        shaped = shaped_turn_rewards(t, algo)
        rewards[row, : len(shaped)] = torch.tensor(shaped, dtype=torch.float64)
        for k, (start, end) in enumerate(t.turn_spans):
            index[row, start - 1 : end - 1] = k
    return TurnLayout(index, rewards, counts)


def void_turn_rows(trajectories: list[Trajectory]) -> torch.Tensor:
    """[N] bool: episodes with a void turn (neither a tool call nor an answer), SimpleTIR's filter."""
    return torch.tensor([t.stats.get("void_turns", 0) > 0 for t in trajectories])


def turn_end_token_rewards(layout: TurnLayout, mask: torch.Tensor) -> torch.Tensor:
    """[N, T-1] float64: turn k's reward at the last sampled position (mask true) of turn k. A turn
    left with no sampled position (masked by rollout correction) pays at the row's next sampled
    position, the first step after it, or else at the row's last one, so no reward is dropped."""
    out = torch.zeros(mask.shape, dtype=torch.float64)
    for row in range(mask.shape[0]):
        sampled = mask[row].nonzero().flatten()
        if len(sampled) == 0:
            continue  # a row out of the loss trains nothing
        for k in range(int(layout.counts[row])):
            positions = (layout.index[row] == k).nonzero().flatten()
            if len(positions) == 0:
                continue  # an episode without policy turns: its (zero) reward has no turn
            start, end = positions[0], positions[-1]
            inside, after = sampled[(sampled >= start) & (sampled <= end)], sampled[sampled > end]
            at = inside[-1] if len(inside) else after[0] if len(after) else sampled[-1]
            out[row, at] += layout.rewards[row, k]
    return out
