"""The policy objective of a step, composed from the registries by the algo config:

    loss = agg(policy_loss) + kl_coef * agg(KL to reference)  [unless the KL is in the reward]
           - entropy_coef * agg(entropy)

With algo.kl_bias_correction the KL term is KL_t * r_t, r_t = exp(logp_t - logp_old_t) with its
gradient: the tokens were sampled from pi_old, so r_t makes the term's expected gradient that of
KL(pi_theta || pi_ref) (DeepSeek-AI, "DeepSeek-V3.2", 2025, arXiv:2512.02556, eq. 7-8; TRL's
use_bias_correction_kl). On-policy r_t = 1 but its gradient is not 0: the correction changes the
update even then, as in TRL. kl_coef is the batch's own (`TrainingBatch.kl_coef`, set each step
by an adaptive controller, reinforge.algos.kl_control) when it has one, else algo.kl_coef.

with one aggregation mode for every term, so micro-batch losses add up to the mini-batch loss.

The proximal forward folded into the update: when a batch carries `behaviour_logprobs` (the
engine's, set by `advantage_step.prepare_batch` when the update is a single optimizer step, see
`gap_measured_in_update` there), this forward's own log-probs are the proximal ones. The loss
then reports the engine's log-prob gap to them (reinforge.algos.logprob_gap), and with
`algo.tis_cap` (decoupled PPO) takes them, detached, as old log-probs:

    old_logprobs = logprobs.detach(),   tis_weights = min(exp(old_logprobs - behaviour), cap)

(per token, or per sample with algo.tis_level, reinforge.algos.losses.rollout_correction),
which is what the separate no-grad forward would have given, since no optimizer step happens
between the two. Without a cap old_logprobs stay the behaviour log-probs (plain PPO). The metrics
are means over this micro-batch's sampled tokens (and maxima / minima for the `_max` / `_min`
keys); the learner combines micro-batch metrics by token count (and max / min), so the logged
values are the same whole-batch values prepare_batch reports without the fold.

Token selection (the per-token policy term times a 0/1 keep, the aggregation's counts unchanged,
as TRL does): off-policy sequence masking (algo.off_policy_mask_threshold,
reinforge.algos.losses.off_policy_mask) against the engine's log-probs, and the top-entropy
tokens (algo.top_entropy_quantile, entropy_selection.py), which the entropy bonus is then
restricted to as well. With algo.adaptive_entropy the bonus's coefficient is an
AdaptiveEntropyCoef (adaptive_entropy.py) that the loss feeds each micro-batch's entropy and the
loop steps after every optimizer step.
"""

from __future__ import annotations

import torch

from reinforge.algos.losses.adaptive_entropy import AdaptiveEntropyCoef
from reinforge.algos.losses.aggregation import aggregate
from reinforge.algos.losses.entropy_selection import dropped_token_frac, high_entropy_mask
from reinforge.algos.losses.off_policy_mask import off_policy_sequence_mask
from reinforge.algos.logprob_gap import logprob_gap_metrics
from reinforge.algos.losses.rollout_correction import rollout_is_weights
from reinforge.algos.losses.kl import kl_penalty
from reinforge.algos.losses.policy import PolicyLossParams, get_policy_loss
from reinforge.algos.types import LossNormalizer
from reinforge.config import AlgoConfig
from reinforge.learner.batch import TrainingBatch
from reinforge.learner.policy_learner import LossFn

CISPO_DEFAULT_EPS_HIGH = 5.0


def policy_loss_params(algo: AlgoConfig, tis_weights: torch.Tensor | None = None) -> PolicyLossParams:
    """Map the config's one pair of clip ranges onto the loss in use."""
    high = algo.clip_eps_high if algo.clip_eps_high is not None else algo.clip_eps
    return PolicyLossParams(
        clip_eps_low=algo.clip_eps,
        clip_eps_high=high,
        dual_clip_c=algo.dual_clip_c,
        gspo_eps_low=algo.clip_eps,
        gspo_eps_high=high,
        cispo_eps_high=algo.clip_eps_high if algo.clip_eps_high is not None else CISPO_DEFAULT_EPS_HIGH,
        tis_weights=tis_weights,
        sapo_tau_pos=algo.sapo_tau_pos,
        sapo_tau_neg=algo.sapo_tau_neg,
        gmpo_eps_low=algo.clip_eps,
        gmpo_eps_high=high,
        clip_cov_ratio=algo.clip_cov_ratio,
        clip_cov_lb=algo.clip_cov_lb,
        clip_cov_ub=algo.clip_cov_ub,
        kl_cov_ratio=algo.kl_cov_ratio,
        kl_cov_coef=algo.kl_cov_coef,
        vespo_k_pos=algo.vespo_k_pos,
        vespo_lambda_pos=algo.vespo_lambda_pos,
        vespo_k_neg=algo.vespo_k_neg,
        vespo_lambda_neg=algo.vespo_lambda_neg,
    )


def adaptive_entropy_coef(algo: AlgoConfig) -> AdaptiveEntropyCoef | None:
    """The run's adaptive entropy coefficient (trainer state), or None without algo.adaptive_entropy."""
    if not algo.adaptive_entropy:
        return None
    return AdaptiveEntropyCoef(algo.entropy_coef, algo.entropy_target, algo.entropy_coef_delta, algo.entropy_coef_min, algo.entropy_coef_max)


def engine_logprobs(micro: TrainingBatch) -> torch.Tensor:
    """The rollout engine's log-probs of a micro-batch, wherever prepare_batch left them."""
    for logprobs in (micro.behaviour_logprobs, micro.engine_logprobs):
        if logprobs is not None:
            return logprobs
    return micro.old_logprobs  # no proximal forward replaced them


def make_policy_objective(algo: AlgoConfig, entropy_control: AdaptiveEntropyCoef | None = None) -> LossFn:
    """`entropy_control`: the adaptive entropy coefficient (adaptive_entropy_coef), owned by the loop."""
    policy_loss = get_policy_loss(algo.policy_loss)
    kl_in_loss = algo.kl_coef > 0 and not algo.kl_in_reward

    def loss_fn(logprobs: torch.Tensor, entropy: torch.Tensor, micro: TrainingBatch, norm: LossNormalizer):
        mask = micro.loss_mask
        old_logprobs, tis_weights, tis_metrics = micro.old_logprobs, micro.tis_weights, {}
        if micro.behaviour_logprobs is not None:  # this forward is the proximal one (module docstring)
            tis_metrics = logprob_gap_metrics(logprobs, micro.behaviour_logprobs, mask)
            if algo.tis_cap is not None:
                old_logprobs = logprobs.detach()
                tis_weights, weight_metrics = rollout_is_weights(
                    old_logprobs, micro.behaviour_logprobs, mask, algo.tis_cap, algo.tis_level, algo.tis_floor
                )
                tis_metrics.update(weight_metrics)
        params = policy_loss_params(algo, tis_weights)
        per_token, metrics = policy_loss(logprobs, old_logprobs, micro.advantages, mask, params)
        metrics.update(tis_metrics)
        keep, entropy_mask = None, mask
        if algo.off_policy_mask_threshold is not None:
            keep = off_policy_sequence_mask(micro.advantages, logprobs, engine_logprobs(micro), mask, algo.off_policy_mask_threshold)
            metrics["mask/off_policy_dropped_frac"] = dropped_token_frac(keep, mask)
        if algo.top_entropy_quantile < 1.0:
            entropy_mask = high_entropy_mask(entropy, mask, algo.top_entropy_quantile)
            metrics["mask/top_entropy_dropped_frac"] = dropped_token_frac(entropy_mask, mask)
            keep = entropy_mask if keep is None else keep & entropy_mask
        if keep is not None:
            per_token = torch.where(keep, per_token, torch.zeros_like(per_token))
        loss = aggregate(per_token, mask, algo.loss_agg, norm)
        if kl_in_loss:
            kl = kl_penalty(logprobs, micro.ref_logprobs, algo.kl_estimator) * mask
            if algo.kl_bias_correction:  # module docstring: the KL of pi_theta, from samples of pi_old
                is_ratio = torch.exp(torch.where(mask, logprobs - old_logprobs, torch.zeros_like(logprobs)))
                kl = kl * is_ratio
                metrics["kl_is_ratio_mean"] = (is_ratio.detach() * mask).sum().item() / max(mask.sum().item(), 1)
            kl_coef = micro.kl_coef if micro.kl_coef is not None else algo.kl_coef  # the adaptive controller's
            loss = loss + kl_coef * aggregate(kl, mask, algo.loss_agg, norm)
            metrics["kl_ref"] = kl.detach().sum().item() / max(mask.sum().item(), 1)
        coef = algo.entropy_coef
        if entropy_control is not None:
            coef = entropy_control.applied()  # the coefficient of the last optimizer step's end
            entropy_control.observe((entropy.detach() * entropy_mask).sum().item(), entropy_mask.sum().item())
        if coef > 0:
            loss = loss - coef * aggregate(entropy * entropy_mask, mask, algo.loss_agg, norm)
        return loss, metrics

    return loss_fn
