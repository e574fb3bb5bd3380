"""Frozen players: pool members sampling through one lane of the run's engine, their weights loaded on demand.

`FrozenPlayers.engines()` maps each pool member's player name to an engine-like object whose
`generate` first loads that member's weights into the lane (when another member's are loaded),
then samples there. The lane is the Engine protocol's second user with weights of its own
(`Engine.lane()`, `load_weights(state, version)`), so the pool plays on every engine:

- the in-process TorchEngine: a lane is an engine over a plain copy of the policy's sampling model
  (one extra model in memory, however many members; the price is a `load_state_dict` and the fused
  decoder's rebuild per member per round: docs/games.md has the measured cost);
- the Ray rollout workers and vLLM (engines/weight_sync.py): the lane shares the engine's device,
  which holds one weight set at a time; a member's weights are shipped (versioned and verified like
  a sync) when the member is switched to, and the device swaps between the policy's and the
  member's weights when the two sample in turn.

A member's weights load under its step as the version, so its generations say which snapshot played.
"""

from __future__ import annotations

from reinforge.engines.base import Engine, Generation, SamplingParams
from reinforge.games.pool import OpponentPool


class FrozenPlayers:
    def __init__(self, pool: OpponentPool, policy_engine: Engine):
        self.pool = pool
        self.lane = policy_engine.lane()  # the pool's own weights on the run's engine
        self.loaded: str | None = None
        self.loads = 0  # member switches since the last step (the on-demand cost, logged as pool/weight_loads)

    def _load(self, name: str) -> None:
        if self.loaded != name:
            member = self.pool.member(name)
            self.lane.load_weights(member.weights, member.step)
            self.loaded, self.loads = name, self.loads + 1

    def engines(self) -> dict[str, MemberEngine]:
        return {m.name: MemberEngine(self, m.name) for m in self.pool.members}

    def engine(self, name: str) -> MemberEngine:
        """Member `name`'s engine, also once it retired from the pool (a paused game still seats it)."""
        return MemberEngine(self, name)


class MemberEngine:
    """One pool member as an Engine for play_games: its weights, the pool's lane."""

    def __init__(self, players: FrozenPlayers, name: str):
        self.players, self.name = players, name

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None, **options) -> list[Generation]:
        """`options`: the Engine protocol's others (partial rollouts' budgets and stop rule)."""
        self.players._load(self.name)
        return self.players.lane.generate(prompts, params, seed=seed, **options)
