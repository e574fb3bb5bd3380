"""An adaptive KL coefficient that steers the policy's KL to the reference toward a target.

    e      = clip(KL / KL_target - 1, -0.2, 0.2)
    beta  <- beta * (1 + e * n / horizon)

after each step, with KL the step's measured KL and n its number of samples. Source: Ziegler et
al., "Fine-Tuning Language Models from Human Preferences" (2019, arXiv:1909.08593), section 2.2;
as verl's AdaptiveKLController (verl/trainer/ppo/core_algos.py), which verl updates once per step
with n = the batch size. The proportional error is clipped so that one odd batch moves beta by
at most 20% x n / horizon.

`measured_kl` is the KL the controller sees: as verl's apply_kl_penalty, the per-token estimate
between the policy that sampled and the reference, averaged over each sequence's sampled tokens,
then over sequences (here only those with a sampled token: a sample left out of the loss says
nothing about the KL).
"""

from __future__ import annotations

import torch

from reinforge.algos.losses.kl import kl_penalty


class AdaptiveKLController:
    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if init_kl_coef <= 0 or target_kl <= 0 or horizon <= 0:
            raise ValueError(
                f"an adaptive KL coefficient needs kl_coef > 0 (it is multiplied, so 0 stays 0), target > 0 and horizon > 0; "
                f"got {init_kl_coef}, {target_kl}, {horizon}"
            )
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + proportional_error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])


def measured_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, estimator: str) -> float:
    """Mean over sequences (with a sampled token) of each one's mean per-token KL estimate."""
    with torch.no_grad():
        mask = mask.bool()
        kl = torch.where(mask, kl_penalty(logprobs, ref_logprobs, estimator), torch.zeros_like(logprobs))
        lengths = mask.sum(-1)
        live = lengths > 0
        if not live.any():
            return 0.0
        return (kl.sum(-1)[live] / lengths[live]).mean().item()
