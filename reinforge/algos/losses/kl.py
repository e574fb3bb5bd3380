"""Per-token estimators of KL(pi || pi_ref) from tokens sampled from pi.

With d = logp_ref - logp = log(pi_ref / pi) at a token sampled from pi:

    k1 = -d = logp - logp_ref          unbiased, high variance, can be negative
    k2 = d^2 / 2                       biased (exact only to second order), low variance, >= 0
    k3 = exp(d) - 1 - d                unbiased (E_pi[exp(d)] = 1), low variance, >= 0

Source: J. Schulman, "Approximating KL Divergence" (2020). k3 is the KL term of GRPO in Shao et
al., "DeepSeekMath" (2024), eq. 4. Unbiasedness is about the values; gradients differ: on-policy,
the expected gradient of k2 (not of k1 or k3) is the gradient of KL(pi || pi_ref).

verl's further choices (verl/trainer/ppo/core_algos.py, kl_penalty):

    abs          |logp - logp_ref|
    low_var_kl   k3 with d clamped to [-20, 20] and the result to [-10, 10] (bounded for stability)
    k1+, k3+, low_var_kl+
                 straight-through: the value of k1 / k3 / low_var_kl, the gradient of k2,
                 x = k2 - sg(k2) + sg(base), so the penalty reads as an unbiased KL estimate and
                 pushes with the unbiased on-policy gradient of KL(pi || pi_ref).
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def k1(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return logprobs - ref_logprobs


def k2(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logprobs - ref_logprobs) ** 2


def k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    log_ratio = ref_logprobs - logprobs
    # expm1 instead of exp(x) - 1: in float32, exp(x) - x - 1 rounds to about -6e-8 for |x| ~ 5e-8,
    # a negative "KL"; expm1(x) - x stays >= 0 and is accurate for small x.
    return torch.expm1(log_ratio) - log_ratio


k3_kl = k3  # the name existing callers use


def abs_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    return (logprobs - ref_logprobs).abs()


def low_var_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (torch.expm1(log_ratio) - log_ratio).clamp(-10.0, 10.0)


def k2_gradient(base: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The estimator whose value is `base`'s and whose gradient is k2's (straight-through)."""

    def estimator(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
        backward = k2(logprobs, ref_logprobs)
        return backward - backward.detach() + base(logprobs, ref_logprobs).detach()

    return estimator


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "k1": k1,
    "k2": k2,
    "k3": k3,
    "abs": abs_kl,
    "low_var_kl": low_var_kl,
    "k1+": k2_gradient(k1),
    "k3+": k2_gradient(k3),
    "low_var_kl+": k2_gradient(low_var_kl),
}


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate [N, T] by estimator name (a key of KL_ESTIMATORS); mask and aggregate it."""
    if kind not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {kind!r}; valid: {', '.join(sorted(KL_ESTIMATORS))}")
    return KL_ESTIMATORS[kind](logprobs, ref_logprobs)
