"""GMPO: the geometric mean of the token-level ratios, each clipped in log space, per sequence.

    d_t   = logp_t - logp_old_t
    c_t   = sgn(A_i) * min(sgn(A_i) d_t, sgn(A_i) clamp(d_t, -eps_low, eps_high))
    rho_i = exp( (1 / n_i) sum_{t in mask_i} c_t )
    L_i   = -A_i rho_i
    J     = mean_i L_i

Source: Zhao et al., "Geometric-Mean Policy Optimization" (2025, arXiv:2507.20673). GRPO takes
the arithmetic mean of the token terms r_t A, so one token with an outlier ratio dominates the
update; the geometric mean of the r_t is far less sensitive to outliers, which lets the clip
range be much wider: the paper clips log r_t to [-0.4, 0.4] (ratios in [e^-0.4, e^0.4]), i.e.
params.gmpo_eps_low / params.gmpo_eps_high (algo.clip_eps / algo.clip_eps_high under the
`gmpo` policy loss; the `gmpo` preset sets 0.4). The clip is pessimistic as PPO's is: it only
bites where it lowers the objective (d_t above eps_high for A > 0, below -eps_low for A < 0).
With A_i = 0 the sequence has no loss.

Aggregation: as gspo, L_i sits on every sampled token of row i, so `seq_mean_token_mean` gives
exactly mean_i L_i (verl's compute_policy_loss_geo_mean: torch.mean over sequences; an empty row
adds 0 to both); it is the only aggregation GMPO is defined for (REQUIRED_AGGREGATION).
With truncated IS weights (params.tis_weights) a sequence is weighted by their geometric mean
over its sampled tokens, as verl does. Advantages must be one per sequence ([N], or [N, T] constant along each row's sampled tokens).

Metrics (fractions of sampled tokens whose log-ratio left the range, split by the sign of A, as
verl reports them): clip_frac, clip_frac_low (A < 0), clip_frac_high (A > 0); seq_ratio_mean
(rho over sequences with a sampled token); ratio_mean, approx_kl_old.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from reinforge.algos.losses.policy_common import (
    PolicyLossParams,
    finish,
    masked_mean,
    ratio_metrics,
    sequence_terms,
)


def gmpo(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask, adv, log_ratio = sequence_terms(logprobs, old_logprobs, advantages, mask)
    sign = torch.sign(adv)[:, None]
    clamped = log_ratio.clamp(-params.gmpo_eps_low, params.gmpo_eps_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clamped)
    lengths = mask.sum(-1)
    seq_ratio = torch.exp(torch.where(mask, pessimistic, torch.zeros_like(pessimistic)).sum(-1) / lengths.clamp(min=1))
    seq_loss = -adv * seq_ratio
    if params.tis_weights is not None:  # one weight per sequence: the weights' geometric mean, as verl does
        log_w = torch.log(params.tis_weights.detach().to(logprobs.dtype) + 1e-10)
        seq_loss = seq_loss * torch.exp(torch.where(mask, log_w, torch.zeros_like(log_w)).sum(-1) / lengths.clamp(min=1))
        params = replace(params, tis_weights=None)
    per_token = finish(seq_loss[:, None].expand_as(logprobs), mask, params)

    with torch.no_grad():
        outside = (log_ratio != clamped).to(logprobs.dtype)
        high = masked_mean(outside * (adv > 0)[:, None], mask)
        low = masked_mean(outside * (adv < 0)[:, None], mask)
        live = lengths > 0
        metrics = {
            "clip_frac": low + high,
            "clip_frac_low": low,
            "clip_frac_high": high,
            "seq_ratio_mean": seq_ratio[live].mean().item() if live.any() else 0.0,
            **ratio_metrics(log_ratio, mask),
        }
    return per_token, metrics
