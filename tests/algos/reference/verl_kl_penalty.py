"""verl's KL penalty estimators and adaptive KL controller, transcribed in plain torch / Python to test
reinforge.algos.losses.kl and reinforge.algos.kl_control against.

Upstream: github.com/volcengine/verl, verl/trainer/ppo/core_algos.py, kl_penalty, kl_penalty_forward
and AdaptiveKLController, commit b178a3cd56f58b2d502255daba591e92833930a7. Copyright 2024 Bytedance
Ltd. and/or its affiliates; Apache License 2.0 (http://www.apache.org/licenses/LICENSE-2.0).
numpy's clip is replaced by min/max. One change: at this commit kl_penalty_forward has no branch
for a name ending in "+", so upstream kl_penalty(..., "k3+") raises NotImplementedError; the
transcription strips the "+" before the forward branches, as verl's docs describe the option
(docs/algo/grpo.md: "Appending '+' ... would apply straight through to employ k2"). Note that
verl's k3 is its low_var_kl (clamped); reinforge's k3 is not.
"""

from __future__ import annotations

import torch


def kl_penalty(logprob, ref_logprob, kl_penalty):
    forward_score = kl_penalty_forward(logprob, ref_logprob, kl_penalty)
    if not kl_penalty.endswith("+") or kl_penalty in ("mse", "k2"):
        return forward_score
    backward_score = 0.5 * (logprob - ref_logprob).square()
    return backward_score - backward_score.detach() + forward_score.detach()


def kl_penalty_forward(logprob, ref_logprob, kl_penalty):
    kl_penalty = kl_penalty.rstrip("+")  # not upstream: see the module docstring
    if kl_penalty in ("kl", "k1"):
        return logprob - ref_logprob
    if kl_penalty == "abs":
        return (logprob - ref_logprob).abs()
    if kl_penalty in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if kl_penalty in ("low_var_kl", "k3"):
        kl = ref_logprob - logprob
        kl = torch.clamp(kl, min=-20, max=20)
        ratio = torch.exp(kl)
        kld = (ratio - kl - 1).contiguous()
        return torch.clamp(kld, min=-10, max=10)
    raise ValueError(f"unknown kl_penalty {kl_penalty!r} (verl raises NotImplementedError here)")


class AdaptiveKLController:
    def __init__(self, init_kl_coef, target_kl, horizon):
        self.value = init_kl_coef
        self.target = target_kl
        self.horizon = horizon

    def update(self, current_kl, n_steps):
        target = self.target
        proportional_error = min(max(current_kl / target - 1, -0.2), 0.2)
        mult = 1 + proportional_error * n_steps / self.horizon
        self.value *= mult
