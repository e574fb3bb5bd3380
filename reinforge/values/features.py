"""A prompt's representation for the value model: the policy's own hidden states, detached.

Chosen over a separate trunk because the policy already encodes what it finds hard, the forward is
one no-grad pass over the prompt tokens only (no response), and nothing new is trained or stored; its
cost is logged every step as value/feature_seconds (docs/value_models.md has the measured share).
"""

from __future__ import annotations

import torch

from reinforge.envs.base import Env
from reinforge.tasks.task import Task


@torch.no_grad()
def prompt_states(model: torch.nn.Module, env: Env, tasks: list[Task], pad_token_id: int, chunk: int = 256) -> torch.Tensor:
    """[K, hidden] float64: the last layer's hidden states mean-pooled over each prompt's tokens."""
    ids = [env.prompt_ids(t) for t in tasks]
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        width = max(len(p) for p in part)
        tokens = torch.full((len(part), width), pad_token_id, dtype=torch.long)
        mask = torch.zeros(len(part), width, dtype=torch.long)
        for row, p in enumerate(part):  # right padding: a prompt's states never attend to padding
            tokens[row, : len(p)] = torch.tensor(p)
            mask[row, : len(p)] = 1
        hidden = model(input_ids=tokens.to(device), attention_mask=mask.to(device), output_hidden_states=True).hidden_states[-1]
        mask = mask.to(device).unsqueeze(-1).to(hidden.dtype)
        out.append(((hidden * mask).sum(1) / mask.sum(1)).double().cpu())
    return torch.cat(out)
