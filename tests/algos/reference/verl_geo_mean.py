"""verl's GMPO policy loss (geo_mean), transcribed in plain torch to test reinforge.algos.losses.gmpo.

Upstream: github.com/volcengine/verl, verl/trainer/ppo/core_algos.py, compute_policy_loss_geo_mean,
commit b178a3cd56f58b2d502255daba591e92833930a7 (adapted there from github.com/callsys/GMPO).
Copyright 2024 Bytedance Ltd. and/or its affiliates; Apache License 2.0
(http://www.apache.org/licenses/LICENSE-2.0). The ActorConfig is replaced by the two clip
ranges; the metrics are left out.
"""

from __future__ import annotations

import torch


def compute_policy_loss_geo_mean(old_log_prob, log_prob, advantages, response_mask, cliprange_low, cliprange_high, rollout_is_weights=None):
    negative_approx_kl = log_prob - old_log_prob
    sgn_advantage = torch.sign(advantages)
    negative_approx_kl_clamp = torch.clamp(negative_approx_kl, -cliprange_low, cliprange_high)
    negative_approx_kl_min = torch.min(sgn_advantage * negative_approx_kl, sgn_advantage * negative_approx_kl_clamp)
    negative_approx_kl_min = sgn_advantage * negative_approx_kl_min

    response_mask_sum = response_mask.sum(dim=-1)
    ratio = torch.exp((negative_approx_kl_min * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8))
    advantage = (advantages * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
    pg_losses = -advantage * ratio

    if rollout_is_weights is not None:
        seq_is_weights = torch.exp(
            (torch.log(rollout_is_weights + 1e-10) * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
        )
        pg_losses = pg_losses * seq_is_weights

    return torch.mean(pg_losses)
