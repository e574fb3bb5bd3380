"""From scored trajectories to a training batch: reference, importance weights, values, advantages.

Everything here runs without gradients, between rollout and update, and only what the config
asks for is computed (no reference forward unless a KL or ACE needs it, no critic unless gae).
"""

from __future__ import annotations

import torch

from reinforge.algos.advantages import EstimatorSpec
from reinforge.algos.logprob_gap import logprob_gap_metrics
from reinforge.algos.losses.divergence_rejection import divergence_rejection_mask
from reinforge.algos.losses.rollout_correction import normalize_is_weights, rollout_is_weights, rollout_rejection_mask
from reinforge.algos.losses.kl import kl_penalty
from reinforge.algos.losses.sample_weighting import confidence_scaled_negatives, sequence_log_ratio, weight_by_sign
from reinforge.algos.types import AdvantageInputs
from reinforge.config import AlgoConfig
from reinforge.learner.batch import TrainingBatch, collate
from reinforge.learner.critic_learner import CriticLearner
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.learner.sum_pi_squared import logprobs_and_sum_pi_squared
from reinforge.rollout.trajectory import Trajectory
from reinforge.trainer.episode_advantages import per_episode_advantages
from reinforge.trainer.truncation_mask import truncated_rows
from reinforge.trainer.turn_credit import turn_end_token_rewards, turn_layout, void_turn_rows


def update_forward_is_proximal(algo: AlgoConfig, learner: PolicyLearner) -> bool:
    """Whether every forward of the update runs on the weights that were current before it (the
    proximal policy, in eval mode): one optimizer step (epochs == mini_batches == 1, the micro-batch
    forwards of gradient accumulation all run before that step) and no active dropout. Then the
    update's own forward measures the engine's log-prob gap for free (no extra forward)."""
    if algo.epochs != 1 or algo.mini_batches != 1:
        return False
    return not has_active_dropout(learner.model)


def proximal_forward_folds(algo: AlgoConfig, learner: PolicyLearner) -> bool:
    """Whether the proximal forward of decoupled PPO can be left to the update itself.

    Decoupled PPO (Fu et al., "AReaL: A Large-Scale Asynchronous Reinforcement Learning System
    for Language Reasoning", 2025) trains on data sampled by a behaviour policy with

        w_t * min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t),   r_t = pi_theta / pi_prox,
        w_t = min(pi_prox / pi_behav, cap)   (truncated, Yao et al. 2025: losses.importance)

    where pi_prox is the learner's policy before the update. When the update is ONE optimizer
    step (epochs == mini_batches == 1; the micro-batches of gradient accumulation all run their
    forward before that step), the weights at every micro-batch forward are still those of
    pi_prox, so pi_prox is the detached log-probs of that forward: the loss can take them there
    and the no-grad forward here is redundant (one full learner forward saved per step).

    Kept otherwise: with several optimizer steps the later forwards no longer see pi_prox; with
    ACE (ace_alpha > 0) the advantages need the proximal log-probs before the update (the
    sequence log-ratio to the reference is taken from old_logprobs); with rollout masking
    (algo.rollout_mask, algo.rollout_reject) the samples to reject are chosen from the proximal
    log-probs before the update; with algo.tis_normalize the weights are divided by their mean
    over the whole batch, not a micro-batch's; and when the model has active dropout, a train-mode forward is not the eval-mode
    forward that defines pi_prox.
    """
    if algo.ace_alpha > 0 or algo.rollout_mask is not None or algo.rollout_reject or algo.tis_normalize:
        return False
    return update_forward_is_proximal(algo, learner)


def gap_measured_in_update(algo: AlgoConfig, learner: PolicyLearner) -> bool:
    """Whether prepare_batch leaves the proximal forward to the update: the fold of decoupled PPO
    (with algo.tis_cap), or, without it, any update whose forward runs on the proximal weights.
    Otherwise it runs one no-grad learner forward of the batch (about a third of an update's
    compute: a forward without the backward)."""
    if algo.rollout_mask is not None or algo.rollout_reject:
        return False
    if algo.tis_cap is not None:
        return proximal_forward_folds(algo, learner)
    return update_forward_is_proximal(algo, learner)


def has_active_dropout(model: torch.nn.Module) -> bool:
    """Dropout modules with p > 0, or a config dropout rate > 0 (attention dropout in HF models is
    often a functional call driven by `config.attention_dropout`, not a module)."""
    if any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules()):
        return True
    config = getattr(model, "config", None)
    rates = vars(config).items() if config is not None else ()
    return any(
        ("dropout" in name or "pdrop" in name) and isinstance(v, float) and v > 0 for name, v in rates
    )


def agent_ids(trajectories: list[Trajectory]) -> torch.Tensor | None:
    """Each sample's agent as an index (in order of first appearance); None when no trajectory
    names one (single-agent envs)."""
    if all(t.agent is None for t in trajectories):
        return None
    index: dict[str | None, int] = {}
    return torch.tensor([index.setdefault(t.agent, len(index)) for t in trajectories])


def prepare_batch(
    trajectories: list[Trajectory],
    algo: AlgoConfig,
    estimator: EstimatorSpec,
    reward_weights: dict[str, float],
    pad_token_id: int,
    learner: PolicyLearner | None,
    reference: ReferenceModel | None,
    critic: CriticLearner | None,
    prompt_prior: dict | None = None,
) -> tuple[TrainingBatch, dict[str, float]]:
    """`prompt_prior`: the prompt-value model's fields of AdvantageInputs (prompt_values, prompt_value_var,
    prior_test_z), for estimators that declare needs_prompt_values (v05_prior)."""
    batch = collate(trajectories, None, pad_token_id)
    metrics: dict[str, float] = {}
    if algo.drop_void_turns:
        # SimpleTIR: an episode with a void turn is left out of the loss; its reward still counts
        # in its group's baseline, as the other episodes were sampled alongside it.
        void = void_turn_rows(trajectories)
        batch.loss_mask[void] = False
        metrics["void_dropped_frac"] = void.double().mean().item()
    if algo.mask_truncated:
        # DAPO's overlong filtering (trainer.truncation_mask): like a void turn, out of the loss only.
        truncated = truncated_rows(trajectories)
        batch.loss_mask[truncated] = False
        metrics["mask/truncated_frac"] = truncated.double().mean().item()
    mask = batch.loss_mask
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float64)
    turns = turn_layout(trajectories, mask.shape[1], algo)
    if turns.rewards.any():
        metrics["turn_reward_mean"] = (turns.rewards.sum(1)).mean().item()
        if not (estimator.turn_level or estimator.needs_critic):  # episode-level estimators see the turn rewards summed in
            rewards = rewards + turns.rewards.sum(1)
    components = {name: torch.tensor([t.rewards[name] for t in trajectories]) for name in reward_weights}

    # The engine's log-prob gap to the learner (logprob_gap/*), every step: measured by the update's
    # own forward when that runs on the proximal weights (the loss sees behaviour_logprobs), else
    # by one no-grad forward here, which decoupled PPO and rollout masking reuse.
    behaviour = batch.old_logprobs
    proximal = None
    if learner is None:  # the advantage math alone (no policy to compare with): nothing to measure
        if algo.tis_cap is not None or algo.rollout_mask is not None or algo.rollout_reject:
            raise ValueError("algo.tis_cap, algo.rollout_mask and algo.rollout_reject need the learner's log-probs: pass the learner")
    elif gap_measured_in_update(algo, learner):
        batch.behaviour_logprobs = behaviour
    else:
        proximal = learner.logprobs(batch)
        if mask.any():
            metrics.update(logprob_gap_metrics(proximal, behaviour, mask))
    if algo.rollout_mask is not None:
        # Rejected tokens / samples leave the loss as void turns do; their rewards still count in
        # their group's baseline, as they were sampled alongside the rest.
        high = algo.rollout_mask_high
        low = algo.rollout_mask_low if algo.rollout_mask_low is not None else 1.0 / high
        keep, mask_metrics = rollout_rejection_mask(proximal, behaviour, mask, low, high, algo.rollout_mask)
        mask &= keep
        metrics.update(mask_metrics)
    if algo.rollout_reject:  # divergence criteria (k2 / k3), chained with the ratio band above
        keep, reject_metrics = divergence_rejection_mask(proximal, behaviour, mask, algo.rollout_reject, algo.rollout_reject_threshold)
        mask &= keep
        metrics.update(reject_metrics)

    if reference is not None:
        batch.ref_logprobs = reference.logprobs(batch)
    token_rewards = None
    if algo.kl_in_reward and algo.kl_coef > 0:
        # KL of the sampling policy to the reference, per sampled token, paid as negative reward.
        kl = kl_penalty(batch.old_logprobs, batch.ref_logprobs, algo.kl_estimator) * mask
        metrics["kl_ref"] = kl.sum().item() / max(mask.sum().item(), 1)
        if estimator.token_rewards:  # gae, REINFORCE++: the KL is a reward at every token
            token_rewards = -algo.kl_coef * kl
        else:
            rewards = rewards - algo.kl_coef * kl.sum(1).double()

    if estimator.needs_critic and turns.rewards.any():
        # gae: each turn's reward at its last sampled token (the mask is final here), beside the KL's.
        at_turn_ends = turn_end_token_rewards(turns, mask)
        token_rewards = at_turn_ends if token_rewards is None else token_rewards + at_turn_ends

    if algo.tis_cap is not None and proximal is not None:
        # Decoupled PPO: the ratio is taken against the learner's own (proximal) log-probs, and
        # the gap to the policy that actually sampled is corrected by capped importance weights
        # (per token, or per sample with algo.tis_level). When the fold applies (proximal is None),
        # the update's own forward yields the proximal log-probs and the loss computes the weights
        # (and reports tis_weight_mean / tis_capped_frac), see policy_objective.
        batch.tis_weights, tis_metrics = rollout_is_weights(proximal, behaviour, mask, algo.tis_cap, algo.tis_level, algo.tis_floor)
        if algo.tis_normalize:
            batch.tis_weights, norm_metrics = normalize_is_weights(batch.tis_weights, mask, algo.tis_level)
            tis_metrics.update(norm_metrics)
        if algo.off_policy_mask_threshold is not None:
            batch.engine_logprobs = behaviour  # off-policy masking compares with the engine's, not the proximal ones
        batch.old_logprobs = proximal
        metrics.update(tis_metrics)

    if critic is not None:
        batch.old_values = critic.values(batch)
    if estimator.needs_greedy_baseline:  # ReMax: collect_groups rolled out each prompt greedily and scored it
        missing = sum(t.baseline_reward is None for t in trajectories)
        if missing:
            raise ValueError(
                f"algo.advantage={algo.advantage} needs each sample's greedy-rollout reward (Trajectory.baseline_reward); "
                f"{missing} of {len(trajectories)} samples have none (collect them with collect_groups(greedy_baseline=True))"
            )
        estimator_extras = {"greedy_rewards": torch.tensor([t.baseline_reward for t in trajectories], dtype=torch.float64)}
    else:
        estimator_extras = {}
    if estimator.needs_policy_probs:  # optimal token baseline: pi of each sampled token and sum_v pi(v)^2
        if learner is None:
            raise ValueError(f"algo.advantage={algo.advantage} needs the learner's token probabilities: pass the learner")
        logprobs, sum_pi_squared = logprobs_and_sum_pi_squared(learner.model, batch, learner.micro_batch_size, learner.temperature)
        estimator_extras |= {"old_logprobs": logprobs, "sum_pi_squared": sum_pi_squared, "is_weights": batch.tis_weights}
        metrics["sum_pi_squared_mean"] = sum_pi_squared[mask].double().mean().item() if mask.any() else 0.0

    # One advantage per episode when an agent's episode came as several pieces (gateway).
    out, untrained = per_episode_advantages(
        estimator.fn,
        AdvantageInputs(
            rewards=rewards,
            group_ids=torch.tensor([t.group_id for t in trajectories]),
            mask=mask,
            reward_components=components,
            reward_weights=reward_weights,
            values=batch.old_values,
            token_rewards=token_rewards,
            gamma=algo.gamma,
            lam=algo.lam,
            pass_k=algo.pass_k,
            turn_index=turns.index,
            turn_rewards=turns.rewards,
            turn_counts=turns.counts,
            agent_ids=agent_ids(trajectories),
            reinforce_reward=algo.reinforce_reward,
            mars_discount=algo.mars_discount,
            scale_rewards=algo.scale_rewards,
            **estimator_extras,
            **(prompt_prior or {}),
        ),
        trajectories,
    )
    if untrained is not None:
        batch.loss_mask[untrained] = False
    advantages = out.advantages
    if (algo.positive_weight, algo.negative_weight) != (1.0, 1.0):
        advantages = weight_by_sign(advantages, algo.positive_weight, algo.negative_weight)
    if algo.ace_alpha > 0:
        seq_log_ratio = sequence_log_ratio(batch.old_logprobs, batch.ref_logprobs, mask)
        advantages = confidence_scaled_negatives(advantages, seq_log_ratio, algo.ace_alpha, algo.ace_shape)
    batch.advantages = advantages.float()
    batch.returns = out.returns
    metrics.update(out.metrics)
    return batch, metrics
