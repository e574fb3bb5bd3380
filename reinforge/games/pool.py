"""A pool of frozen past policies as training opponents (`task.params.opponent_pool`).

    task:
      params:
        train_seats: [[policy, pool], [pool, policy], [policy, policy]]   # "pool": a frozen past policy
        opponent_pool:
          every: 10        # snapshot the policy after every 10th RL step (the warm start is always the first member)
          size: 4          # keep the newest 4 snapshots
          sample: pfsp     # latest | uniform | pfsp
          pfsp_power: 2.0  # pfsp's weight (1 - score)^p

Each game with a `pool` seat draws its opponent from the pool when the game is set up:
- `latest`: the newest snapshot (self-play against last round's policy);
- `uniform`: any member, equally likely (fictitious self-play over the window);
- `pfsp`: prioritized fictitious self-play (Vinyals et al. 2019, "Grandmaster level in StarCraft II
  using multi-agent reinforcement learning", Nature 575): member m is drawn with probability
  proportional to (1 - x_m)^p, where x_m is the policy's score against m in the training games so far,
  (wins + draws / 2 + 1) / (games + 2) (Laplace's rule: an unplayed member scores 1/2). Opponents the
  policy loses to are picked more; ones it always beats fade out.

A member is the policy's weights at that step (a LoRA policy's merged weights), kept in CPU memory
(a state dict). They all play through one lane of the run's engine (reinforge.games.frozen_players):
before a member's batched call of a round its weights are loaded into that lane. Cost (docs/games.md,
measured on the in-process engine): the memory of one model per member plus one, and one weight
load per member per round instead of one resident engine per member.

The pool (weights, win/draw/loss counts, its sampling RNG) is part of the run's checkpoint, so a
resumed run draws the same opponents as the uninterrupted one.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from reinforge.models.lora import merged_state_dict

POOL = "pool"  # the seat name of a frozen past policy in task.params.train_seats
MEMBER_PREFIX = "pool@"  # a member's player name: pool@<step>


class OpponentPoolSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    every: int = Field(10, gt=0, description="Snapshot the policy into the pool after every N-th RL step (the warm start, step 0, is always the first member).")
    size: int = Field(4, gt=0, description="The pool keeps its newest N snapshots.")
    sample: Literal["latest", "uniform", "pfsp"] = Field("uniform", description="How a game draws its pool opponent: latest, uniform, or pfsp (opponents the policy loses to more often).")
    pfsp_power: float = Field(1.0, gt=0, description="pfsp: a member's weight is (1 - the policy's score against it) ** pfsp_power.")


def member_name(step: int) -> str:
    return f"{MEMBER_PREFIX}{step}"


def is_member(who: str) -> bool:
    return who.startswith(MEMBER_PREFIX)


@dataclass
class PoolMember:
    step: int
    weights: dict[str, torch.Tensor] = field(repr=False)
    wins: int = 0  # the policy's results against this member, in training games
    draws: int = 0
    losses: int = 0

    @property
    def name(self) -> str:
        return member_name(self.step)

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def policy_score(self) -> float:
        """The policy's smoothed score against this member: (wins + draws / 2 + 1) / (games + 2)."""
        return (self.wins + 0.5 * self.draws + 1.0) / (self.games + 2.0)


class OpponentPool:
    def __init__(self, spec: OpponentPoolSpec, seed: int):
        self.spec = spec
        self.members: list[PoolMember] = []
        self.rng = random.Random(f"opponent-pool-{seed}")
        # Members that left the pool while a paused game (partial rollouts) still seats them: kept
        # out of the draws, only to finish those games (`pin`).
        self.retired: list[PoolMember] = []
        self.pinned: set[str] = set()

    def due(self, step: int) -> bool:
        return step % self.spec.every == 0

    def snapshot(self, step: int, model: torch.nn.Module) -> None:
        """Add the policy's weights after `step` (`model`: the engine's, or a LoRA learner's, whose merged
        weights a lane loads); the oldest member leaves when the pool is full."""
        weights = {k: v.detach().to("cpu", copy=True) for k, v in merged_state_dict(model).items()}
        self.members = [m for m in self.members if m.step != step] + [PoolMember(step, weights)]
        leaving = self.members[: max(0, len(self.members) - self.spec.size)]
        del self.members[: len(leaving)]
        self.retired += [m for m in leaving if m.name in self.pinned]

    def pin(self, names: set[str]) -> None:
        """The members the paused games seat (partial rollouts): one of them leaving the pool stays
        retired until no paused game seats it."""
        self.pinned = set(names)
        self.retired = [m for m in self.retired if m.name in self.pinned]

    def member(self, name: str) -> PoolMember:
        for m in self.members + self.retired:
            if m.name == name:
                return m
        raise KeyError(f"{name} is not in the opponent pool ({[m.name for m in self.members]})")

    def probabilities(self) -> list[float]:
        if not self.members:
            raise RuntimeError("the opponent pool is empty: the warm start is snapshotted before the first training game")
        n = len(self.members)
        if self.spec.sample == "latest":
            return [0.0] * (n - 1) + [1.0]
        if self.spec.sample == "uniform":
            return [1.0 / n] * n
        weights = [(1.0 - m.policy_score) ** self.spec.pfsp_power for m in self.members]
        total = sum(weights)
        return [w / total for w in weights]

    def choose(self) -> str:
        """A member's name for one game, by `sample`."""
        return self.rng.choices(self.members, weights=self.probabilities())[0].name

    def record(self, name: str, outcome: str) -> None:
        """The policy's `outcome` ("win", "draw", "loss"; "unfinished" is not counted) against member `name`."""
        member = self.member(name)
        if outcome == "win":
            member.wins += 1
        elif outcome == "draw":
            member.draws += 1
        elif outcome == "loss":
            member.losses += 1

    def metrics(self) -> dict[str, float]:
        games = sum(m.games for m in self.members)
        score = sum(m.wins + 0.5 * m.draws for m in self.members) / games if games else float("nan")
        probs = self.probabilities() if self.members else []
        return {
            "pool/size": float(len(self.members)),
            "pool/newest_step": float(self.members[-1].step) if self.members else float("nan"),
            "pool/policy_score": score,  # the policy's (wins + draws / 2) / games against the pool so far
            "pool/p_newest": probs[-1] if probs else float("nan"),
        }

    def state_dict(self) -> dict:
        state = {"members": [asdict(m) for m in self.members], "rng": self.rng.getstate()}
        if self.pinned:  # partial rollouts: the paused games' members
            state.update(retired=[asdict(m) for m in self.retired], pinned=sorted(self.pinned))
        return state

    def load_state_dict(self, state: dict) -> None:
        self.members = [PoolMember(**m) for m in state["members"]]
        self.rng.setstate(state["rng"])
        self.retired = [PoolMember(**m) for m in state.get("retired", [])]
        self.pinned = set(state.get("pinned", []))
