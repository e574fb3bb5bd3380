"""Random batches for comparing estimators with verl's: ragged masks, an empty row, a zero-variance group."""

from __future__ import annotations

import numpy as np
import torch


def random_batch(seed: int, groups: int = 4, size: int = 4, length: int = 10, binary: bool = False):
    """(rewards [N] float64, group ids [N] long, mask [N, L] bool, token_level_rewards [N, L] with each
    reward on its row's last sampled token, verl's index as a numpy array). Group 0 is constant; row 1
    has no sampled token (its reward is then carried nowhere: it is set to 0); groups are interleaved."""
    g = torch.Generator().manual_seed(seed)
    n = groups * size
    rewards = torch.randint(0, 2, (n,), generator=g).double() if binary else torch.randn(n, generator=g, dtype=torch.float64)
    ids = torch.arange(n) % groups
    rewards[ids == 0] = 0.5 if not binary else 1.0
    lengths = torch.randint(1, length + 1, (n,), generator=g)
    lengths[1] = 0
    rewards[1] = 0.0
    mask = torch.arange(length)[None, :] < lengths[:, None]
    token_rewards = torch.zeros(n, length, dtype=torch.float64)
    rows = lengths > 0
    token_rewards[rows, lengths[rows] - 1] = rewards[rows]
    return rewards, ids, mask, token_rewards, ids.numpy().astype(np.int64)
