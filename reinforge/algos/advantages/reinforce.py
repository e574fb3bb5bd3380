"""REINFORCE without a baseline: each sample's own reward is its advantage (W-REINFORCE's building block)."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, check_sample_tensors, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput

REINFORCE_REWARDS = ("raw", "signed")


@register_advantage("reinforce")
def raw_reward_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """Advantages, one per sample [N], with no baseline:

        raw:     A_i = r_i
        signed:  A_i = 2 r_i - 1      (a [0, 1] score read as the paper's +-1 reward)

    (`inputs.reinforce_reward`, algo.reinforce_reward). A group of all-wrong answers is not
    silent here as it is under a group baseline: with signed rewards each of its samples gets -1
    and pushes probability away from what it sampled.

    Source: Zhu, Xia, Wei, Wu, Chen, Meng, "The Surprising Effectiveness of Negative Reinforcement in
    LLM Reasoning" (arXiv 2506.01347, 2025). Their rewards are r in {-1, +1}; REINFORCE on those
    splits into positive-sample reinforcement (PSR, the +1 samples) and negative-sample
    reinforcement (NSR, the -1 samples), and W-REINFORCE is lambda * L_PSR + L_NSR with lambda = 0.1,
    i.e. A = +lambda for a correct answer and -1 for a wrong one. Their code
    (TianHongZXY/RLVR-Decomposed, verl/trainer/ppo/core_algos.py, compute_psr_nsr_outcome_advantage,
    advantage='weighted') takes the verifier's 0/1 score s and gives lambda * s to a correct answer
    and s - 1 to a wrong one: exactly `signed` followed by algo.positive_weight = lambda
    (reinforge.algos.losses.sample_weighting.weight_by_sign), which is the w_reinforce preset.
    """
    check_sample_tensors(inputs.rewards, inputs.group_ids)
    rewards = inputs.rewards.double()
    if inputs.reinforce_reward == "signed":
        if ((rewards < 0) | (rewards > 1)).any():
            raise ValueError(
                "algo.reinforce_reward=signed reads each reward as a [0, 1] verifier score (2r - 1: correct +1, wrong -1), "
                f"but got rewards from {rewards.min().item():g} to {rewards.max().item():g}; use algo.reinforce_reward=raw "
                "or a reward in [0, 1] (reward.clip=[0, 1])"
            )
        advantages = 2.0 * rewards - 1.0
    elif inputs.reinforce_reward == "raw":
        advantages = rewards
    else:
        raise ValueError(f"unknown reinforce_reward {inputs.reinforce_reward!r}; valid: {', '.join(REINFORCE_REWARDS)}")
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=sample_metrics(advantages))
