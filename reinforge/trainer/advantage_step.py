"""From scored trajectories to a training batch: reference, importance weights, values, advantages.

Everything here runs without gradients, between rollout and update, and only what the config
asks for is computed (no reference forward unless a KL or ACE needs it, no critic unless gae).
"""

from __future__ import annotations

import torch

from reinforge.algos.advantages import EstimatorSpec
from reinforge.algos.losses.importance import truncated_is_weights
from reinforge.algos.losses.kl import kl_penalty
from reinforge.algos.losses.sample_weighting import confidence_scaled_negatives, sequence_log_ratio, weight_by_sign
from reinforge.algos.types import AdvantageInputs
from reinforge.config import AlgoConfig
from reinforge.learner.batch import TrainingBatch, collate
from reinforge.learner.critic_learner import CriticLearner
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.rollout.trajectory import Trajectory
from reinforge.trainer.turn_credit import turn_layout, void_turn_rows


def prepare_batch(
    trajectories: list[Trajectory],
    algo: AlgoConfig,
    estimator: EstimatorSpec,
    reward_weights: dict[str, float],
    pad_token_id: int,
    learner: PolicyLearner,
    reference: ReferenceModel | None,
    critic: CriticLearner | None,
) -> tuple[TrainingBatch, dict[str, float]]:
    batch = collate(trajectories, None, pad_token_id)
    metrics: dict[str, float] = {}
    if algo.drop_void_turns:
        # SimpleTIR: an episode with a void turn is left out of the loss; its reward still counts
        # in its group's baseline, as the other episodes were sampled alongside it.
        void = void_turn_rows(trajectories)
        batch.loss_mask[void] = False
        metrics["void_dropped_frac"] = void.double().mean().item()
    mask = batch.loss_mask
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float64)
    turns = turn_layout(trajectories, mask.shape[1], algo)
    if turns.rewards.any():
        metrics["turn_reward_mean"] = (turns.rewards.sum(1)).mean().item()
        if not estimator.turn_level:  # episode-level estimators see the turn rewards summed in
            rewards = rewards + turns.rewards.sum(1)
    components = {name: torch.tensor([t.rewards[name] for t in trajectories]) for name in reward_weights}

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

    if algo.tis_cap is not None:
        # Decoupled PPO: the ratio is taken against the learner's own (proximal) log-probs, and
        # the gap to the policy that actually sampled is corrected by capped importance weights.
        proximal = learner.logprobs(batch)
        batch.tis_weights, tis_metrics = truncated_is_weights(proximal, batch.old_logprobs, mask, algo.tis_cap)
        batch.old_logprobs = proximal
        metrics.update(tis_metrics)

    if critic is not None:
        batch.old_values = critic.values(batch)

    out = estimator.fn(
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
        )
    )
    advantages = out.advantages
    if (algo.positive_weight, algo.negative_weight) != (1.0, 1.0):
        advantages = weight_by_sign(advantages, algo.positive_weight, algo.negative_weight)
    if algo.ace_alpha > 0:
        seq_log_ratio = sequence_log_ratio(batch.old_logprobs, batch.ref_logprobs, mask)
        advantages = confidence_scaled_negatives(advantages, seq_log_ratio, algo.ace_alpha)
    batch.advantages = advantages.float()
    batch.returns = out.returns
    metrics.update(out.metrics)
    return batch, metrics
