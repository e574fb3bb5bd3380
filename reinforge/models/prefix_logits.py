"""The policy's next-token logits at the end of each of N token sequences, in one no-grad forward.

Rollout pruning on an engine without a decode hook (vLLM, Ray workers, chunked sampling:
reinforge.rollout.pruned_sampling) reads the policy's logits at a response prefix from the
in-process model, as the TorchEngine's hook reads them from its decoder. Rows are left-padded with
positions counted from each row's first token (as the TorchEngine samples), so the last position
of every row is its prefix's end, and only that position goes through the output layer
(`logits_to_keep=1`): a [rows, T, V] tensor of logits is never built.
"""

from __future__ import annotations

import torch

FORWARD_ROWS = 32  # sequences per forward (bounds the activations of one call)


@torch.no_grad()
def prefix_logits(model, sequences: list[list[int]]) -> torch.Tensor:
    """[N, V] float32 logits (on the CPU) of the token that would follow each sequence."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out = []
    try:
        for start in range(0, len(sequences), FORWARD_ROWS):
            chunk = sequences[start : start + FORWARD_ROWS]
            width = max(len(s) for s in chunk)
            ids = torch.zeros(len(chunk), width, dtype=torch.long)
            mask = torch.zeros(len(chunk), width, dtype=torch.long)
            for row, s in enumerate(chunk):
                ids[row, width - len(s) :] = torch.tensor(s)
                mask[row, width - len(s) :] = 1
            positions = (mask.cumsum(1) - 1).clamp(min=0)
            logits = model(
                input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device), logits_to_keep=1
            ).logits
            out.append(logits[:, -1].float().cpu())
    finally:
        model.train(was_training)
    return torch.cat(out)
