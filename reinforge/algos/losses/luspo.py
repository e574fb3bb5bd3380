"""LUSPO: GSPO's clipped sequence-level ratio, with each sequence's loss scaled by its length.

    s_i = exp( (1 / n_i) sum_{t in mask_i} (logp_t - logp_old_t) )
    L_i = -min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)
    J   = (1 / N) sum_i n_i L_i

Source: Liu, Yin, Shi, Yang, Zeng and Qiu, "Length-Unbiased Sequence Policy Optimization: Revealing
and Controlling Response Length Variation in RLVR" (2026, arXiv:2602.05261), as implemented
by TRL 1.16 (GRPOTrainer, loss_type="luspo" with importance_sampling_level="sequence": the
per-sequence loss is summed over the sequence's tokens, then averaged over sequences). GSPO
averages L_i over sequences, so a long response weighs no more than a short one and its
per-token gradient is diluted by 1 / n_i; this biases the policy toward short answers. Scaling
by n_i removes that bias. The clip range is GSPO's: params.gspo_eps_low / gspo_eps_high
(algo.clip_eps / algo.clip_eps_high under this loss).

Aggregation: L_i sits on every sampled token of row i, so `seq_mean_token_sum` gives exactly
(1 / N) sum_i n_i L_i; it is the only aggregation LUSPO is defined for (REQUIRED_AGGREGATION).
Advantages must be one per sequence. Metrics: as gspo's.
"""

from __future__ import annotations

import torch

from reinforge.algos.losses.gspo import gspo
from reinforge.algos.losses.policy_common import PolicyLossParams


def luspo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    # The per-token terms are GSPO's; only the aggregation (seq_mean_token_sum, enforced) differs.
    return gspo(logprobs, old_logprobs, advantages, mask, params)
