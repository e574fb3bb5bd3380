"""Rotary position embeddings as three ops, bit for bit transformers' (the engine and the packed learner forward)."""

from __future__ import annotations

import torch


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin with its first half negated: rotate_half(x) * sin == roll(x, half) * signed sin."""
    half = sin.shape[-1] // 2
    return torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """transformers' apply_rotary_pos_emb of x [..., head_dim], bit for bit, given `signed_sin`:
    x * cos + roll(x, half) * signed sin, three ops instead of rotate_half's six."""
    return x * cos + torch.roll(x, x.shape[-1] // 2, dims=-1) * sin
