"""Right-padded batches shaped like a GRPO batch, and a small model, for the packed-forward tests
(tests/learner/test_packed_forward.py, tests/kernels/test_packed_attention.py)."""

from __future__ import annotations

import torch

PAD = 0


def small(cls, config_cls, **overrides):
    torch.manual_seed(0)
    base = dict(
        vocab_size=48, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, pad_token_id=PAD,
    )
    return cls(config_cls(**{**base, **overrides})).eval()


def right_padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    return ids, mask


def grpo_rows(groups: int = 3, group_size: int = 4, seed: int = 0, prompt_tokens: tuple[int, int] = (5, 12)) -> list[list[int]]:
    """Groups of rows that share a prompt (5-12 tokens), with completions of 1-20 tokens; two
    completions of the first group also share their first tokens, and one row repeats another."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(groups):
        prompt = torch.randint(1, 48, (int(torch.randint(prompt_tokens[0], prompt_tokens[1] + 1, (), generator=g)),), generator=g).tolist()
        for _ in range(group_size):
            rows.append(prompt + torch.randint(1, 48, (int(torch.randint(1, 21, (), generator=g)),), generator=g).tolist())
    rows[1] = rows[0][: len(rows[0]) - 1] + [7, 8, 9]
    rows.append(list(rows[2]))
    return rows
