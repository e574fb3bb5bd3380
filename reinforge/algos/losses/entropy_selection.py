"""Training only on the highest-entropy tokens of a batch: the "forking tokens" of a reasoning chain.

    tau_t   = quantile_{1 - rho}( { H_t : t sampled } )         (torch.quantile, linear interpolation)
    keep_t  = sampled_t  and  H_t >= tau                         H_t: the policy's next-token entropy
    l'_t    = keep_t * l_t                                       the policy term of every other token is 0

Source: Wang et al., "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective
Reinforcement Learning for LLM Reasoning" (2025, arXiv 2506.01939): the tokens where the policy
hesitates (a fifth of a chain of thought) carry the useful policy gradient; training on the top
rho = 20% by entropy matches or beats training on all tokens. rho = `algo.top_entropy_quantile`
(1 keeps every token, 0 only the highest-entropy ones); the rule is TRL 1.16's
`GRPOTrainer.get_high_entropy_mask` (`top_entropy_quantile`), float32 quantile included.

The threshold is taken over the sampled tokens of the forward that computed the entropies: in
reinforge one micro-batch (TRL: its per-device batch, gathered over ranks). The masked tokens
stay in the aggregation's counts (the loss is multiplied by keep, as in TRL), so the aggregate of
micro-batches still adds up. Set algo.micro_batch_size to the mini-batch size for one threshold
per optimizer step, as in the paper.
"""

from __future__ import annotations

import torch


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, quantile: float) -> torch.Tensor:
    """[N, T] bool: the sampled tokens whose entropy is in the top `quantile` share (rho in [0, 1])."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"the entropy quantile must be in [0, 1], got {quantile}")
    mask = mask.bool()
    entropy = entropy.detach()
    sampled = entropy[mask].float()
    if sampled.numel() == 0:
        return torch.zeros_like(mask)
    threshold = torch.quantile(sampled, 1.0 - quantile)
    return (entropy * mask.float() >= threshold) & mask


def dropped_token_frac(keep: torch.Tensor, mask: torch.Tensor) -> float:
    """Share of the sampled tokens a selection leaves out (0 on an empty mask), for metrics."""
    mask = mask.bool()
    count = int(mask.sum())
    return int((mask & ~keep.bool()).sum()) / count if count else 0.0
