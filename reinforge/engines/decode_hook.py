"""An optional hook the TorchEngine calls every `every` decode steps: it may stop live rows.

Rollout pruning (reinforge.values.rollout_pruning) uses it to stop responses a success head
predicts will fail. The engine only builds a `DecodeCheck` at those steps and applies the rows the
hook returns (finish reason "pruned", the tokens sampled so far kept); with no hook it does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass
class DecodeCheck:
    """What the engine knows at a check, before it samples token `step` (0-based) of each live row.

    step: tokens every live row has sampled so far.
    rows: [L] the original row (index into the generate call's prompts) of each live row.
    logits: [L, V] the policy's next-token logits of the live rows (raw, before temperature).
    logprobs: [L, step] behaviour log-probs of the tokens each live row sampled so far.
    finished: [B] rows that ended on their own (stop token or budget); pruned: [B] rows stopped by a hook.
    """

    step: int
    rows: torch.Tensor
    logits: torch.Tensor
    logprobs: torch.Tensor
    finished: torch.Tensor
    pruned: torch.Tensor


class DecodeHook(Protocol):
    every: int  # decode steps between checks (the first check is at step `every`)

    def __call__(self, check: DecodeCheck) -> torch.Tensor:
        """[L] bool: the live rows to stop now."""
        ...


@dataclass(frozen=True)
class RowGroups:
    """Where the rows of one generate call belong, for a caller whose rows are not `group_size`
    consecutive rows per group (a round of games, a flush of agents' requests): the group of each
    row, the unit each row is part of (a game, an agent episode: pruning stops a unit whole), and
    per group how many of its units are still in it (not pruned) but have no row in this call
    (games already over or waiting for another policy's move, agents busy in their tools)."""

    groups: list[int]
    units: list[object]
    elsewhere: dict[int, int]


class GroupedDecodeHook(Protocol):
    """A decode hook that is told each call's `RowGroups` (reinforge.values.rollout_pruning.PruningHook):
    games and the gateway ask it for the hook of one generate call."""

    every: int

    def for_rows(self, rows: RowGroups) -> DecodeHook: ...
