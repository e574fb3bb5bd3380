"""KL estimators between the policy and a frozen reference, per token."""

from __future__ import annotations

import torch


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Unbiased, always non-negative estimate of KL(pi || pi_ref) from samples of pi.

        k3 = exp(logp_ref - logp) - (logp_ref - logp) - 1

    Source: J. Schulman, "Approximating KL Divergence" (2020), used as the KL term of GRPO in
    Shao et al., "DeepSeekMath" (2024), eq. 4.
    """
    log_ratio = ref_logprobs - logprobs
    # expm1 instead of exp(x) - 1: in float32, exp(x) - x - 1 rounds to about -6e-8 for |x| ~ 5e-8,
    # a negative "KL"; expm1(x) - x stays >= 0 and is accurate for small x.
    return torch.expm1(log_ratio) - log_ratio
