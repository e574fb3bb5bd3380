"""Choosing the next token from logits: greedy, temperature, top-k and top-p (nucleus)."""

from __future__ import annotations

import torch

from reinforge.engines.base import SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set logits outside the top-k / top-p nucleus to -inf (always keeping the best token)."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = sorted_logits.softmax(-1)
        # Drop a token when the mass strictly before it already reaches top_p.
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def inverse_cdf_sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One draw per row of `probs` [B, V]: the first token whose cumulative mass exceeds u ~ U[0, mass).

    One uniform number per row, where torch.multinomial draws one exponential per vocabulary
    entry: at a small model's decode step that difference is ~5% of the step. Tokens of zero
    probability add no mass, so they are never chosen. u is drawn on the CPU (where a seeded
    `generator` lives) and moved to `probs`' device: the same seed gives the same draws on a GPU.
    """
    cdf = probs.cumsum(-1)
    u = torch.rand(probs.shape[0], 1, generator=generator).to(probs.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=probs.shape[-1] - 1)


def sample_next(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (token ids [B], behaviour log-probs [B]) from last-position logits [B, V]."""
    logits = logits.float()
    if params.temperature == 0:
        tokens = logits.argmax(-1)
        logprobs = logits.log_softmax(-1)
    else:
        scaled = logits if params.temperature == 1.0 else logits / params.temperature  # x / 1.0 == x
        logprobs = scaled.log_softmax(-1)
        filtered = filter_logits(logprobs, params.top_k, params.top_p)
        tokens = inverse_cdf_sample(filtered.softmax(-1), generator)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)
