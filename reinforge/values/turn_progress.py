"""Per-turn progress rewards for multi-turn agents: SPA, stepwise progress attribution.

SPA (Wang et al. 2025, "SPA-RL: Reinforcing LLM Agents via Stepwise Progress Attribution",
arXiv:2505.20732) decomposes an episode's delayed outcome into per-step contributions: a progress
estimator predicts a contribution c_k for each turn k, trained so that they add up to the
outcome, and those contributions are the agent's dense per-turn rewards. Here:

    c_{i,k} = f(mean of token embeddings of turn k (the policy's tokens and the observation after
               them),  k / n_i)                                         (a small trunk of its own)
    loss    = mean_i ( sum_k c_{i,k} - R_i )^2                           (SPA's progress loss)
    r_{i,k} = c_{i,k} + (R_i - sum_j c_{i,j}) / n_i                      (so that sum_k r_{i,k} = R_i exactly)

The residual spread evenly over the turns is ours: SPA's estimator only approximately sums to the
outcome, and we want the outcome itself never to change with the estimator's error. An untrained
estimator therefore gives every turn about R_i / n_i.

How the increments reach the estimators (reinforge.trainer.turn_credit): with gae and a critic (SPA-RL's
own setup, PPO) each turn's reward is paid at its last sampled token and the outcome at the
episode's last, so the rewards the critic learns from are exactly r_{i,k} at the end of turn k. turn_rloo's per-turn
reward is R_{i,k} = (turn reward) + [k = n_i - 1] R_i, so the episode's turn rewards become
(env's turn reward) + r_{i,k} - [k = n_i - 1] R_i, making R_{i,k} = r_{i,k} (plus the env's own):
the return-to-go of turn k is the progress still to be made after the turns before it. Those
extra turn rewards sum to 0 over an episode, so episode-level estimators (which add the turn
rewards' sum to the episode reward) are unchanged.

Each step's episodes are rewarded with the estimator as it stands (so they are unseen data for it),
then join a FIFO buffer on which it takes `train_steps` Adam steps (its own seeded generator; all
of it in `state_dict` for an exact resume).
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from reinforge.config import ProgressConfig
from reinforge.rollout.trajectory import Trajectory


def redistributed_increments(contributions: list[float], outcome: float) -> list[float]:
    """r_k = c_k + (R - sum_j c_j) / n: per-turn rewards that sum to the outcome R exactly."""
    if not contributions:
        raise ValueError("an episode needs at least one turn to share its outcome")
    residual = (outcome - sum(contributions)) / len(contributions)
    return [c + residual for c in contributions]


def progress_turn_rewards(trajectory: Trajectory, increments: list[float]) -> list[float]:
    """The episode's turn rewards with the increments added and the outcome taken off the last
    turn (turn_rloo adds it back there): R_{i,k} = env turn reward + increment."""
    env_rewards = list(trajectory.turn_rewards or [0.0] * trajectory.num_turns)
    rewards = [r + inc for r, inc in zip(env_rewards, increments)]
    rewards[-1] -= trajectory.reward
    return rewards


def turn_token_spans(trajectory: Trajectory) -> list[tuple[int, int]]:
    """Turn k: the policy's tokens and the observation after them, up to the next turn."""
    starts = [start for start, _ in trajectory.turn_spans]
    return [(start, end) for start, end in zip(starts, [*starts[1:], len(trajectory.token_ids)])]


class ProgressEstimator(nn.Module):
    """c_k from a turn's mean token embedding and its relative position."""

    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab_size, dim, mode="mean")
        self.out = nn.Sequential(nn.Linear(dim + 1, dim), nn.ReLU(), nn.Linear(dim, 1))

    def forward(self, tokens: torch.Tensor, offsets: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """tokens: every turn's ids concatenated; offsets: where each turn starts; position: k / n. -> [turns]"""
        return self.out(torch.cat([self.embed(tokens, offsets), position[:, None]], dim=-1)).squeeze(-1)


def _turn_batch(episodes: list[list[list[int]]]):
    """episodes -> (tokens, offsets, positions, episode index of each turn)."""
    tokens, offsets, positions, owners = [], [], [], []
    for i, turns in enumerate(episodes):
        for k, ids in enumerate(turns):
            offsets.append(len(tokens))
            tokens += ids
            positions.append(k / len(turns))
            owners.append(i)
    return torch.tensor(tokens, dtype=torch.long), torch.tensor(offsets), torch.tensor(positions), torch.tensor(owners)


class TurnProgress:
    """The estimator, its optimizer and its episode buffer."""

    def __init__(self, cfg: ProgressConfig, vocab_size: int, seed: int):
        self.cfg = cfg
        with torch.random.fork_rng():  # the estimator's init must not move the run's random stream
            torch.manual_seed(seed)
            self.model = ProgressEstimator(vocab_size, cfg.dim)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.generator = torch.Generator().manual_seed(seed)
        self.buffer: list[tuple[list[list[int]], float]] = []

    def contributions(self, episodes: list[list[list[int]]]) -> list[list[float]]:
        tokens, offsets, positions, owners = _turn_batch(episodes)
        with torch.no_grad():
            c = self.model(tokens, offsets, positions).tolist()
        out: list[list[float]] = [[] for _ in episodes]
        for owner, value in zip(owners.tolist(), c):
            out[owner].append(value)
        return out

    def assign(self, trajectories: list[Trajectory], train_on: list[Trajectory] | None = None) -> dict[str, float]:
        """Set each episode's progress turn rewards, then train on the episodes (those of `train_on`
        only, when given: the staleness filter); progress/* metrics."""
        episodes = [t for t in trajectories if t.num_turns > 0 and not t.reward_failures]
        trained = {id(t) for t in (trajectories if train_on is None else train_on)}
        if not episodes:
            return {}
        turns = [[t.token_ids[a:b] for a, b in turn_token_spans(t)] for t in episodes]
        predicted = self.contributions(turns)
        gap = sum(abs(sum(c) - t.reward) for c, t in zip(predicted, episodes)) / len(episodes)
        for t, c in zip(episodes, predicted):
            t.turn_rewards = progress_turn_rewards(t, redistributed_increments(c, t.reward))
        self.buffer = (self.buffer + [(ts, t.reward) for ts, t in zip(turns, episodes) if id(t) in trained])[-self.cfg.buffer_size :]
        loss = self.train()
        return {"progress/sum_gap": gap, "progress/loss": loss, "progress/first_turn": sum(c[0] for c in predicted) / len(predicted)}

    def train(self) -> float:
        loss = torch.zeros(())
        for _ in range(self.cfg.train_steps):
            pick = torch.randint(len(self.buffer), (min(64, len(self.buffer)),), generator=self.generator).tolist()
            tokens, offsets, positions, owners = _turn_batch([self.buffer[i][0] for i in pick])
            outcome = torch.tensor([self.buffer[i][1] for i in pick], dtype=torch.float32)
            sums = torch.zeros(len(pick)).index_add(0, owners, self.model(tokens, offsets, positions))
            loss = ((sums - outcome) ** 2).mean()
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        return float(loss.detach())

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": copy.deepcopy(self.optimizer.state_dict()), "generator": self.generator.get_state(), "buffer": list(self.buffer)}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.generator.set_state(state["generator"])
        self.buffer = list(state["buffer"])
