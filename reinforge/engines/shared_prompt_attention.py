"""A decode step's attention over a prompt cached once per group of rows (Hydragen's split)."""

from __future__ import annotations

import torch


def shared_prompt_attention(
    q: torch.Tensor, prompt_keys: torch.Tensor, prompt_values: torch.Tensor, prompt_bias: torch.Tensor,
    keys: torch.Tensor, values: torch.Tensor, scale: float | None = None,
) -> torch.Tensor:
    """One decode step's attention when groups of G consecutive rows share their prompt.

    q [B, heads, d]; the prompts' keys and values [D, kv_heads, P, d] with B = D x G and their
    bias [D, 1, 1, P]; each row's sampled tokens' keys and values [B, kv_heads, S, d]; `scale`
    the softmax scale (default d**-0.5). softmax over [prompt | sampled] scores, computed in two parts: the G rows of a group (times
    the heads that share a kv head) form one [G x rep, d] x [d, P] matmul against their prompt, so
    the prompt's cache is read once per group instead of once per row (the idea of Hydragen,
    Juravsky et al. 2024, arXiv:2402.05099). Returns [B, heads, d]."""
    rows, heads, dim = q.shape
    groups, kv_heads, prompt_len, _ = prompt_keys.shape
    group_size, rep = rows // groups, heads // kv_heads

    def by_group(t: torch.Tensor) -> torch.Tensor:  # [B, kv, rep, X] -> [D, kv, G x rep, X]
        t = t.reshape(groups, group_size, kv_heads, rep, t.shape[-1]).permute(0, 2, 1, 3, 4)
        return t.reshape(groups, kv_heads, group_size * rep, t.shape[-1])

    def by_row(t: torch.Tensor) -> torch.Tensor:  # [D, kv, G x rep, X] -> [B, kv, rep, X]
        t = t.view(groups, kv_heads, group_size, rep, t.shape[-1]).permute(0, 2, 1, 3, 4)
        return t.reshape(rows, kv_heads, rep, t.shape[-1])

    q = q.view(rows, kv_heads, rep, dim) * (dim**-0.5 if scale is None else scale)
    prompt_scores = by_row(torch.matmul(by_group(q), prompt_keys.transpose(-1, -2)).add_(prompt_bias))  # [B, kv, rep, P]
    own_scores = torch.matmul(q, keys.transpose(-1, -2))  # [B, kv, rep, S]
    prompt_weights, own_weights = torch.cat([prompt_scores, own_scores], dim=-1).softmax(-1).split([prompt_len, keys.shape[2]], dim=-1)
    from_prompt = by_row(torch.matmul(by_group(prompt_weights), prompt_values))
    return (from_prompt + torch.matmul(own_weights, values)).reshape(rows, heads, dim)  # not contiguous when rep > 1 (GQA)
