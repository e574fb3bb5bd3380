"""verl's masked reductions and loss aggregation, transcribed for the policy-loss reference tests.

Upstream: github.com/volcengine/verl, verl/utils/torch_functional.py (masked_sum, masked_mean) and
verl/trainer/ppo/core_algos.py (agg_loss), commit b178a3cd56f58b2d502255daba591e92833930a7.
Copyright 2024 Bytedance Ltd. and/or its affiliates; Apache License 2.0
(http://www.apache.org/licenses/LICENSE-2.0). Transcribed with the single-process defaults
(dp_size 1, no global batch info); only the modes the tests use.
"""

from __future__ import annotations

import torch


def masked_sum(values, mask, axis=None):
    valid_values = torch.where(mask.bool(), values, 0.0)
    return (valid_values * mask).sum(axis=axis)


def masked_mean(values, mask, axis=None):
    s = masked_sum(values, mask, axis)
    return s / (mask.sum(axis=axis) + 1e-8)


def agg_loss(loss_mat, loss_mask, loss_agg_mode):
    if loss_agg_mode == "token-mean":
        batch_num_tokens = loss_mask.sum()
        return masked_sum(loss_mat, loss_mask) / batch_num_tokens
    if loss_agg_mode == "seq-mean-token-sum":
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1)
        seq_mask = (torch.sum(loss_mask, dim=-1) > 0).float()
        return masked_sum(seq_losses, seq_mask) / seq_mask.sum()
    if loss_agg_mode == "seq-mean-token-mean":
        seq_mask = torch.sum(loss_mask, dim=-1)
        seq_losses = torch.sum(loss_mat * loss_mask, dim=-1) / (seq_mask + 1e-8)
        seq_mask = (seq_mask > 0).float()
        return masked_sum(seq_losses, seq_mask) / seq_mask.sum()
    raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode}")
