"""Frozen players: pool members sampling through one extra model, their weights loaded on demand.

`FrozenPlayers.engines()` maps each pool member's player name to an engine-like object whose
`generate` first loads that member's weights into the shared frozen model (when another member's
are loaded), then samples with an ordinary TorchEngine. One extra model in memory, however many
members; the price is a `load_state_dict` (and the fused decoder's rebuild) per member per round
(docs/games.md has the measured cost against one resident engine per member).

The frozen model is a copy of the policy's own sampling model (its architecture and dtype), made
on first use; it never trains (no_grad, eval mode).
"""

from __future__ import annotations

import copy

import torch

from reinforge.engines.base import Generation, SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.games.pool import OpponentPool


class FrozenPlayers:
    def __init__(self, pool: OpponentPool, policy_engine):
        model = getattr(policy_engine, "model", None)
        if model is None:
            raise RuntimeError(
                "task.params.opponent_pool plays its members through an in-process copy of the policy's model; "
                f"this engine ({type(policy_engine).__name__}) has none (use engine.type=torch without rollout workers)"
            )
        self.pool = pool
        frozen = copy.deepcopy(model).eval()
        for p in frozen.parameters():
            p.requires_grad_(False)
        self.engine = TorchEngine(frozen, policy_engine.pad_token_id, max_batch_size=policy_engine.max_batch_size,
                                  fused=policy_engine.fused)
        self.loaded: str | None = None
        self.loads = 0  # weight loads since the last step (the on-demand cost, logged as pool/weight_loads)

    def _load(self, name: str) -> None:
        if self.loaded != name:
            with torch.no_grad():
                self.engine.model.load_state_dict(self.pool.member(name).weights)
            self.engine.sync_weights(0)  # the fused decoder is rebuilt from the new weights
            self.loaded, self.loads = name, self.loads + 1

    def engines(self) -> dict[str, "MemberEngine"]:
        return {m.name: MemberEngine(self, m.name) for m in self.pool.members}


class MemberEngine:
    """One pool member as an Engine for play_games: its weights, the shared frozen model."""

    def __init__(self, players: FrozenPlayers, name: str):
        self.players, self.name = players, name

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Generation]:
        self.players._load(self.name)
        return self.players.engine.generate(prompts, params, seed=seed)
