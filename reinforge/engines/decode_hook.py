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
