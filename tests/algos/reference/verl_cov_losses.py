"""verl's Clip-Cov and KL-Cov policy losses, transcribed in plain torch to test
reinforge.algos.losses.clip_cov / kl_cov against.

Upstream: github.com/volcengine/verl, verl/trainer/ppo/core_algos.py, compute_policy_loss_clip_cov
and compute_policy_loss_kl_cov, commit b178a3cd56f58b2d502255daba591e92833930a7 (adapted there from
github.com/PRIME-RL/Entropy-Mechanism-of-RL). Copyright 2024 Bytedance Ltd. and/or its affiliates;
Apache License 2.0 (http://www.apache.org/licenses/LICENSE-2.0). The config objects are replaced by
their fields; the metrics are left out. Clip-Cov draws with torch's global generator (torch.randperm).
"""

from __future__ import annotations

import torch

from reference.verl_policy_loss_common import agg_loss, masked_mean


def compute_policy_loss_clip_cov(
    old_log_prob, log_prob, advantages, response_mask, cliprange_low, cliprange_high, loss_agg_mode="token-mean",
    clip_cov_ratio=0.0002, clip_cov_lb=1.0, clip_cov_ub=5.0, rollout_is_weights=None,
):
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    corr = torch.ones_like(advantages)
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_by_origin = (pg_losses2 > pg_losses1) & (response_mask > 0)

    cov_all = (advantages - masked_mean(advantages, response_mask)) * (
        log_prob - masked_mean(log_prob.detach(), response_mask)
    )
    cov_all[response_mask == 0] = -torch.inf
    cov_all[clip_by_origin] = -torch.inf

    clip_num = max(int(clip_cov_ratio * response_mask.sum().item()), 1)
    top_k_idx = (cov_all < clip_cov_ub) & (cov_all > clip_cov_lb) & (response_mask > 0)
    top_k_idx = torch.nonzero(top_k_idx)

    if len(top_k_idx) > 0:
        perm = torch.randperm(len(top_k_idx))
        top_k_idx = top_k_idx[perm[: min(clip_num, len(top_k_idx))]]
    else:
        top_k_idx = torch.empty((0, 2), device=cov_all.device, dtype=torch.long)

    corr[top_k_idx[:, 0], top_k_idx[:, 1]] = 0
    pg_losses = torch.maximum(pg_losses1, pg_losses2) * corr
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    return agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)


def compute_policy_loss_kl_cov(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", kl_cov_ratio=0.0002, ppo_kl_coef=1.0,
    rollout_is_weights=None,
):
    negative_approx_kl = log_prob - old_log_prob
    abs_kl = negative_approx_kl.abs()
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses_kl = -advantages * ratio + ppo_kl_coef * abs_kl
    pg_losses = pg_losses1

    all_valid = response_mask > 0
    all_valid_idx = torch.nonzero(all_valid.reshape(-1), as_tuple=True)[0]
    all_valid_adv = advantages[all_valid].detach().reshape(-1).cpu()
    all_valid_logp = log_prob[all_valid].detach().reshape(-1).cpu()

    k = min(kl_cov_ratio, len(all_valid_adv))

    if k != 0:
        cov_lst_all = (all_valid_adv - all_valid_adv.mean()) * (all_valid_logp - all_valid_logp.mean())
        k_percent_nums = max(1, int(len(cov_lst_all) * kl_cov_ratio))
        large_cov_idxs = torch.topk(cov_lst_all, k_percent_nums, largest=True).indices

        if len(large_cov_idxs) != 0:
            large_cov_idxs = all_valid_idx[large_cov_idxs]
            pg_losses[large_cov_idxs // advantages.shape[1], large_cov_idxs % advantages.shape[1]] = pg_losses_kl[
                large_cov_idxs // advantages.shape[1], large_cov_idxs % advantages.shape[1]
            ]

    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    return agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)
