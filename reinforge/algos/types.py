"""The data every algorithm function takes and returns: plain tensors in small dataclasses.

Shapes: N samples (trajectories) in the batch; T = sequence length - 1, aligned so that index t
is the prediction of token t+1 (see reinforge.learner.batch.TrainingBatch). `mask[n, t]` is true
where token t+1 was sampled by the policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class AdvantageInputs:
    rewards: torch.Tensor  # [N] weighted total reward per sample
    group_ids: torch.Tensor  # [N] samples of one task share an id
    mask: torch.Tensor  # [N, T] bool, sampled tokens
    reward_components: dict[str, torch.Tensor] = field(default_factory=dict)  # name -> [N], unweighted
    reward_weights: dict[str, float] = field(default_factory=dict)  # name -> weight
    values: torch.Tensor | None = None  # [N, T] critic values V(s_t) at each position (gae)
    token_rewards: torch.Tensor | None = None  # [N, T] extra per-token rewards, e.g. a KL penalty
    # Multi-turn episodes (turn-level estimators): which policy turn each position belongs to
    # (-1 outside the policy's turns), and each episode's per-turn rewards, zero-padded to K turns.
    turn_index: torch.Tensor | None = None  # [N, T] long
    turn_rewards: torch.Tensor | None = None  # [N, K] float64
    turn_counts: torch.Tensor | None = None  # [N] long, turns of each episode (>= 1)
    # Multi-player episodes (games): which agent (player / role) produced each sample; None otherwise.
    agent_ids: torch.Tensor | None = None  # [N] long
    # A prompt-value model's prior (v05_prior): each sample's prompt's pass rate predicted before sampling,
    # the variance tau^2 of that prediction's error, and the z of the test that rejects a contradicted prior.
    prompt_values: torch.Tensor | None = None  # [N] float64
    prompt_value_var: torch.Tensor | None = None  # [N] float64
    prior_test_z: float | None = None
    gamma: float = 1.0
    lam: float = 1.0
    eps: float = 1e-6
    pass_k: int = 1
    # Options of single estimators (algo.*), read only by the estimator that names them.
    reinforce_reward: str = "raw"  # reinforce: raw (A = r) or signed (A = 2r - 1, a [0, 1] score read as +-1)
    mars_discount: str = "turn"  # mars: gamma per turn (the paper) or per token position (the authors' code)
    scale_rewards: str = "group"  # grpo: divide by the group's std, the batch's, or not at all
    # Optimal token baseline (needs_policy_probs): the policy's log-prob of each sampled token and
    # sum_v pi(v)^2 at each position, from one learner forward; truncated IS weights if any.
    old_logprobs: torch.Tensor | None = None  # [N, T]
    sum_pi_squared: torch.Tensor | None = None  # [N, T]
    is_weights: torch.Tensor | None = None  # [N, T]
    # ReMax (needs_greedy_baseline): the reward of one greedy rollout of each sample's prompt.
    greedy_rewards: torch.Tensor | None = None  # [N] float64


@dataclass
class AdvantageOutput:
    advantages: torch.Tensor  # [N] (one per sample) or [N, T] (per token)
    returns: torch.Tensor | None = None  # [N, T] value targets (critic-based estimators)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class LossNormalizer:
    """Counts over the whole mini-batch, so micro-batch losses add up to the mini-batch loss."""

    num_tokens: int  # sampled tokens in the mini-batch
    num_sequences: int  # samples in the mini-batch
    max_response_tokens: int  # the constant L of Dr. GRPO's aggregation (rollout.max_new_tokens)
