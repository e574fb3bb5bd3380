"""Plain on-policy REINFORCE: the score-function gradient, no ratio, no clip.

    l_t = -A_t * logp_t          grad_theta l_t = -A_t * grad_theta logp_t

Source: Williams, "Simple Statistical Gradient-Following Algorithms for Connectionist
Reinforcement Learning" (1992). It is unbiased only on-policy (one update per batch of rollouts);
`old_logprobs` enter only the metrics (ratio_mean, approx_kl_old), which show how off-policy the
data was. With `params.tis_weights` it becomes the truncated-IS-corrected REINFORCE.
"""

from __future__ import annotations

import torch

from reinforge.algos.losses.policy_common import PolicyLossParams, finish, masked_log_ratio, ratio_metrics, token_advantages


def reinforce(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    params: PolicyLossParams,
) -> tuple[torch.Tensor, dict[str, float]]:
    mask = mask.bool()
    per_token = finish(-token_advantages(advantages, logprobs) * logprobs, mask, params)
    return per_token, ratio_metrics(masked_log_ratio(logprobs, old_logprobs, mask), mask)
