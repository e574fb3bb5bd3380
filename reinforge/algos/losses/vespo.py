"""VESPO: REINFORCE weighted by a smooth, asymmetric gamma kernel of the sequence-level ratio.

    log w_i = clamp( sum_{t in mask_i} clamp(logp_t - logp_old_t, -20, 20), log 1e-8, 20 )
    phi(w)  = exp(lambda) * w^k * exp(-lambda w)       (phi(1) = 1; k, lambda by the sign of A_t)
    l_t     = -sg(phi(w_i)) * A_t * logp_t              grad l_t = -phi(w_i) A_t grad logp_t

Source: "VESPO: Variational Sequence-Level Soft Policy Optimization for Stable Off-Policy LLM
Training" (2026, arXiv:2602.10693; code github.com/FloyedShen/VESPO), as implemented by TRL 1.16
(GRPOTrainer.get_gamma_weights and loss_type="vespo"). The kernel reshapes the whole-sequence
importance weight w (a product, not GSPO's geometric mean) instead of clipping it: it rises as
w^k from 0 (samples the current policy would rarely produce fade) and decays as exp(-lambda w)
past its peak at w = k / lambda (samples it now over-produces fade too), with no cliff anywhere.
Parameters (TRL's defaults): params.vespo_k_pos = 2, vespo_lambda_pos = 3 for A >= 0,
vespo_k_neg = 3, vespo_lambda_neg = 2 for A < 0 (algo.vespo_*).

Truncated IS weights against the engine (params.tis_weights) enter the kernel, as TRL's vLLM
importance ratio does: log w_i += sum_t clamp(log tis_t, log 1e-8, 20) over the sampled tokens,
and the loss itself is not multiplied by them. TRL aggregates VESPO by token_mean (its DAPO
normalization); any aggregation is allowed here.

Advantages may vary along a row ([N, T]): w is the sequence's, k and lambda follow each token's A.
Metrics: phi_mean (over sampled tokens), seq_log_ratio_mean (over sequences with a sampled token), ratio_mean, approx_kl_old.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from reinforge.algos.losses.policy_common import (
    PolicyLossParams,
    finish,
    masked_mean,
    ratio_metrics,
    token_terms,
)

LOG_W_MIN = math.log(1e-8)
LOG_W_MAX = 20.0


def gamma_weights(log_w: torch.Tensor, advantages: torch.Tensor, params: PolicyLossParams) -> torch.Tensor:
    """phi(w) = exp(lambda + k log w - lambda w), k and lambda by the sign of A (shapes broadcast)."""
    nonneg = advantages >= 0

    def pick(pos: float, neg: float) -> torch.Tensor:  # tensors, not floats: where() of floats is float32
        return torch.where(nonneg, torch.tensor(pos, dtype=log_w.dtype), torch.tensor(neg, dtype=log_w.dtype))

    k, lam = pick(params.vespo_k_pos, params.vespo_k_neg), pick(params.vespo_lambda_pos, params.vespo_lambda_neg)
    return torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def vespo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask, adv, log_ratio = token_terms(logprobs, old_logprobs, advantages, mask)
    with torch.no_grad():
        log_w = log_ratio.clamp(-20.0, 20.0).sum(-1)
        if params.tis_weights is not None:
            log_tis = torch.log(params.tis_weights.to(logprobs.dtype)).clamp(LOG_W_MIN, LOG_W_MAX)
            log_w = log_w + torch.where(mask, log_tis, torch.zeros_like(log_tis)).sum(-1)
        log_w = log_w.clamp(LOG_W_MIN, LOG_W_MAX)
        phi = gamma_weights(log_w[:, None], adv, params)  # [N, T]: one w per sequence, k and lambda per token's A
    per_token = -phi * adv * logprobs
    per_token = finish(per_token, mask, replace(params, tis_weights=None))  # the weights went into w
    with torch.no_grad():
        live = mask.sum(-1) > 0
        metrics = {
            "phi_mean": masked_mean(phi, mask),
            "seq_log_ratio_mean": log_w[live].mean().item() if live.any() else 0.0,
            **ratio_metrics(log_ratio, mask),
        }
    return per_token, metrics
