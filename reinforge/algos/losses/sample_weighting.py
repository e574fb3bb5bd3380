"""Re-weighting samples by the sign of their advantage, before the policy loss sees them.

weight_by_sign (W-REINFORCE):
    A'_i = positive_weight * A_i  if A_i > 0,   negative_weight * A_i  if A_i < 0,   0 if A_i = 0
Source: Zhu et al., "The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning"
(2025). Their W-REINFORCE is lambda * L_PSR + L_NSR with lambda = 0.1: the positive samples
(correct answers, reward +1) are down-weighted relative to the negative ones (reward -1), which
keeps the policy's entropy up and improves pass@k. Here the split is by the sign of the
advantage; pass the raw +-1 rewards as advantages to get their objective exactly.

confidence_scaled_negatives, ACE (Asymmetric Confidence-aware Error penalty):
    c_i  = sg( sum_{t in mask_i} (logp_t - logp_ref_t) ) = sg( log pi(y_i|x) / pi_ref(y_i|x) )
    A'_i = A_i * (1 + alpha * g(c_i))   if A_i < 0,   A_i otherwise
    g = softplus (the paper's choice: smooth, so borderline errors are told apart) or relu
Source: Xu, Sang, Zhou, He, Wang, "Overconfident Errors Need Stronger Correction: Asymmetric
Confidence Penalties for Reinforcement Learning" (arXiv 2602.21420, 2026). A wrong answer the
policy has become more confident in than the reference (c_i > 0) is penalized more, in proportion
to that confidence; with relu, errors the policy is no surer of than the reference keep their
advantage exactly (softplus still adds a small, vanishing amount); positive samples are untouched.
"""

from __future__ import annotations

import torch


def weight_by_sign(advantages: torch.Tensor, positive_weight: float, negative_weight: float) -> torch.Tensor:
    """Advantages ([N] or [N, T]) scaled by positive_weight where > 0 and negative_weight where < 0."""
    weights = torch.where(advantages > 0, positive_weight, negative_weight).to(advantages.dtype)
    return advantages * weights


def sequence_log_ratio(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N] detached sum over each sample's sampled tokens of (logp_policy - logp_ref)."""
    mask = mask.bool()
    diff = torch.where(mask, logprobs.detach() - ref_logprobs.detach(), torch.zeros_like(logprobs))
    return diff.sum(-1)


CONFIDENCE_SHAPES = {"softplus": torch.nn.functional.softplus, "relu": torch.relu}


def confidence_scaled_negatives(
    advantages: torch.Tensor, seq_log_ratio: torch.Tensor, alpha: float, shape: str = "softplus"
) -> torch.Tensor:
    """ACE: negative advantages ([N] or [N, T]) times 1 + alpha * shape(seq_log_ratio[N]), detached scale."""
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if shape not in CONFIDENCE_SHAPES:
        raise ValueError(f"unknown ACE shape {shape!r}; valid: {', '.join(CONFIDENCE_SHAPES)}")
    scale = 1.0 + alpha * CONFIDENCE_SHAPES[shape](seq_log_ratio.detach()).to(advantages.dtype)
    if advantages.dim() == 2:
        scale = scale[:, None]
    return torch.where(advantages < 0, advantages * scale, advantages)
