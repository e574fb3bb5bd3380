"""verl's rollout rejection, IS-weight batch normalization and PF-PPO re-weighting, transcribed for tests.

Upstream: https://github.com/volcengine/verl, commit b178a3cd56f58b2d502255daba591e92833930a7,
  verl/trainer/ppo/rollout_corr_helper.py: compute_rollout_rejection_mask (the k2 / k3 options;
      the per-option metrics of compute_rs_metrics are left out), compute_rollout_correction_weights
      (weights, truncation and rollout_is_batch_normalize, single process; metrics left out)
  verl/trainer/ppo/core_algos.py: compute_pf_ppo_reweight_data (the weights and the draw; the
      DataProto re-indexing is left out: the draw's indices are returned)
  verl/utils/torch_functional.py: masked_sum, masked_mean
Copyright 2025 Bytedance Ltd. and/or its affiliates; licensed under the Apache License, Version 2.0
(http://www.apache.org/licenses/LICENSE-2.0). Plain torch, kept as close to the original as the
omissions allow.
"""

from __future__ import annotations

import torch

SAFETY_BOUND = 20.0
TOKEN_LEVEL_ROLLOUT_RS_OPTIONS = {"token_k1", "token_k2", "token_k3"}


def masked_sum(values, mask, axis=None):
    valid_values = torch.where(mask.bool(), values, 0.0)
    return (valid_values * mask).sum(axis=axis)


def masked_mean(values, mask, axis=None):
    s = masked_sum(values, mask, axis)
    return s / (mask.sum(axis=axis) + 1e-8)


def compute_rollout_rejection_mask(log_ratio, response_mask, rollout_rs: str, rollout_rs_threshold: str):
    """k2 / k3 options only (single upper bounds); returns the modified response mask."""
    option_modes = [opt.strip() for opt in rollout_rs.split(",") if opt.strip()]
    raw_specs = [part.strip() for part in str(rollout_rs_threshold).split(",") if part.strip()]
    if len(raw_specs) == 1 and len(option_modes) > 1:
        raw_specs = raw_specs * len(option_modes)
    thresholds = {option: float(spec) for option, spec in zip(option_modes, raw_specs)}

    log_ratio_safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
    token_k2 = 0.5 * log_ratio_safe**2
    token_k3 = torch.exp(log_ratio_safe) - 1.0 - log_ratio_safe
    response_mask_bool = response_mask.bool()
    combined_mask = torch.ones_like(response_mask, dtype=log_ratio.dtype)

    def _sequence_sum(values):
        return masked_sum(values, response_mask, axis=-1)

    def _sequence_mean(values):
        return masked_mean(values, response_mask, axis=-1)

    def _sequence_max(values):
        mask_bool = response_mask.bool()
        neg_inf = torch.tensor(float("-inf"), device=values.device, dtype=values.dtype)
        masked_values = values.masked_fill(~mask_bool, neg_inf)
        max_values = masked_values.max(dim=-1).values
        return torch.where(max_values == neg_inf, torch.zeros_like(max_values), max_values)

    for option_name in option_modes:
        upper_value = thresholds[option_name]
        if option_name == "token_k2":
            token_keep_bool = token_k2 <= upper_value
        elif option_name == "token_k3":
            token_keep_bool = token_k3 <= upper_value
        else:
            stat = token_k2 if option_name.endswith("k2") else token_k3
            if option_name.startswith("seq_sum"):
                seq_stat = _sequence_sum(stat)
            elif option_name.startswith("seq_mean"):
                seq_stat = _sequence_mean(stat)
            else:
                seq_stat = _sequence_max(stat)
            token_keep_bool = (seq_stat <= upper_value).unsqueeze(-1).expand_as(response_mask_bool)
        combined_mask = combined_mask * token_keep_bool.to(dtype=log_ratio.dtype)
    return (response_mask * combined_mask).to(dtype=response_mask.dtype)


def compute_rollout_correction_weights(log_ratio, response_mask, rollout_is="token", rollout_is_threshold=2.0, rollout_is_batch_normalize=False):
    if rollout_is == "token":
        log_ratio_safe = torch.clamp(log_ratio, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_safe)
    else:  # "sequence"
        log_ratio_sum = masked_sum(log_ratio, response_mask, axis=-1).unsqueeze(-1)
        log_ratio_sum_safe = torch.clamp(log_ratio_sum, min=-SAFETY_BOUND, max=SAFETY_BOUND)
        rollout_is_weights = torch.exp(log_ratio_sum_safe).expand_as(log_ratio)
    rollout_is_weights = rollout_is_weights * response_mask
    rollout_is_weights = rollout_is_weights.clamp(max=rollout_is_threshold)
    rollout_is_weights = rollout_is_weights.detach()
    if rollout_is_batch_normalize:
        if rollout_is == "token":
            weights_mean = masked_mean(rollout_is_weights, response_mask)
        else:
            seq_weights = masked_mean(rollout_is_weights, response_mask, axis=-1)
            seq_mask = (response_mask.sum(dim=-1) > 0).to(dtype=rollout_is_weights.dtype)
            weights_mean = (seq_weights * seq_mask).sum() / seq_mask.sum().clamp_min(1e-8)
        if weights_mean > 1e-8:
            rollout_is_weights = rollout_is_weights / weights_mean
    return rollout_is_weights


def compute_pf_ppo_weights(scores, reweight_method="pow", weight_pow=2.0):
    """compute_weights of compute_pf_ppo_reweight_data, then its clamp."""
    if reweight_method == "pow":
        weights = torch.pow(torch.abs(scores), weight_pow)
    elif reweight_method == "max_min":
        max_score = torch.max(scores)
        min_score = torch.min(scores)
        weights = torch.where((scores == max_score) | (scores == min_score), 1.0, 0.0)
    elif reweight_method == "max_random":
        max_score = torch.max(scores)
        weights = torch.where(scores == max_score, 0.4, 0.1)
    else:
        raise ValueError(f"Unsupported reweight_method: {reweight_method}")
    return torch.clamp(weights + 1e-8, min=1e-8)


def compute_pf_ppo_sample_indices(scores, reweight_method="pow", weight_pow=2.0):
    """The rows compute_pf_ppo_reweight_data keeps (it draws from torch's global generator)."""
    weights = compute_pf_ppo_weights(scores, reweight_method, weight_pow)
    batch_size = scores.shape[0]
    return torch.multinomial(weights, batch_size, replacement=True)
