"""verl's SAPO policy loss, transcribed in plain torch to test reinforge.algos.losses.sapo against.

Upstream: github.com/volcengine/verl, verl/trainer/ppo/core_algos.py, compute_policy_loss_sapo,
commit b178a3cd56f58b2d502255daba591e92833930a7. Copyright 2024 Bytedance Ltd. and/or its
affiliates; Apache License 2.0 (http://www.apache.org/licenses/LICENSE-2.0). The ActorConfig
is replaced by its two fields (tau_pos, tau_neg); the metrics are left out.
"""

from __future__ import annotations

import torch

from reference.verl_policy_loss_common import agg_loss


def compute_policy_loss_sapo(old_log_prob, log_prob, advantages, response_mask, tau_pos=1.0, tau_neg=1.05, rollout_is_weights=None):
    tau_pos = torch.as_tensor(tau_pos, dtype=advantages.dtype, device=advantages.device)
    tau_neg = torch.as_tensor(tau_neg, dtype=advantages.dtype, device=advantages.device)

    def gate_function(x, tau):
        return torch.sigmoid(tau * (x - 1.0)) * (4.0 / tau)

    negative_approx_kl = log_prob - old_log_prob
    negative_approx_kl = torch.clamp(negative_approx_kl, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    taus = torch.where(condition=advantages > 0, input=tau_pos, other=tau_neg)
    gates = gate_function(ratio, taus)
    pg_losses = -gates * advantages
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    return agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode="seq-mean-token-mean")
