"""Which rows of a batch share which prefixes: the engine's prefill and the learner's packed forward
compute each shared token once."""

from __future__ import annotations

import torch


def first_rows_with_prefix(input_ids: torch.Tensor, valid: torch.Tensor, chunk_elements: int = 1 << 24) -> torch.Tensor:
    """owner[i, t]: the first row j whose real tokens 0..t equal row i's ([N, T] right-padded rows,
    `valid` marking the real tokens; on pads, any row).

    With lcp[i, j] the length of the common real prefix of rows i and j, owner[i, t] is the first j
    with lcp[i, j] > t, that is the first j where the running max of lcp[i, :j+1] exceeds t: a
    binary search in that non-decreasing row. Rows are compared pairwise in chunks of at most
    `chunk_elements` (row, row, position) entries.
    """
    n, width = input_ids.shape
    ended = torch.ones(1, 1, 1, dtype=torch.bool, device=input_ids.device).expand(-1, n, 1)
    lcp = torch.empty(n, n, dtype=torch.long, device=input_ids.device)
    step = max(1, chunk_elements // max(1, n * width))
    for start in range(0, n, step):
        rows = slice(start, start + step)
        differs = (input_ids[rows, None] != input_ids[None]) | ~valid[rows, None] | ~valid[None]
        differs = torch.cat([differs, ended.expand(differs.shape[0], n, 1)], dim=-1)
        lcp[rows] = differs.int().argmax(-1)  # the first differing position (or the end)
    reach = lcp.cummax(dim=1).values
    positions = torch.arange(width, device=input_ids.device).expand(n, width).contiguous()
    return torch.searchsorted(reach, positions, right=True).clamp_(max=n - 1)
