"""Off-policy sequence masking: drop the negative-advantage samples the policy has drifted away from.

    D_i = (1 / n_i) sum_{t in mask_i} (logp_behaviour_t - logp_t)      mean log-ratio, KL(behaviour || pi)
    M_i = 0   if A_i < 0 and D_i > delta,       1 otherwise
    l'_t = M_i * l_t

Source: DeepSeek-AI, "DeepSeek-V3.2: Pushing the Frontier of Open Large Language Models" (2025,
arXiv 2512.02556), eq. 9 ("off-policy sequence masking"): a negative sample that the current
policy already finds much less likely than the policy that sampled it is mostly noise (stale
or mismatched data), and pushing its probability down further destabilizes training; positive
samples are always kept. delta = `algo.off_policy_mask_threshold`; the rule is TRL 1.16's
`GRPOTrainer.get_off_policy_mask` (`off_policy_mask_threshold`): the current log-probs are
detached, the behaviour ones are the rollout engine's (which sees both the drift of the
optimizer steps and the engine/learner mismatch), and [N, T] advantages decide per token.
"""

from __future__ import annotations

import torch


def off_policy_sequence_mask(
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    mask: torch.Tensor,
    threshold: float,
) -> torch.Tensor:
    """[N, T] bool keep: false on the samples with A < 0 whose mean log-ratio to the behaviour
    policy exceeds `threshold`; advantages [N] or [N, T]."""
    mask = mask.bool()
    diff = torch.where(mask, behaviour_logprobs.detach() - logprobs.detach(), torch.zeros_like(logprobs))
    diff = torch.nan_to_num(diff, nan=0.0)  # a token the engine could not score is no evidence (as TRL)
    mean_log_ratio = diff.sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages
    keep = (adv >= 0) | (mean_log_ratio <= threshold)
    return keep.expand_as(mask) & mask
