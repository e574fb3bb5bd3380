"""W-REINFORCE as its authors compute it, transcribed for comparison (plain torch).

Upstream: github.com/TianHongZXY/RLVR-Decomposed, verl/trainer/ppo/core_algos.py,
compute_psr_nsr_outcome_advantage, at commit a5d4e7c (a fork of verl). Copyright 2024 Bytedance Ltd.
and/or its affiliates; licensed under the Apache License, Version 2.0. Transcribed unchanged but for
the signature's type hints and the 'positive' / 'negative' branches, which are kept.
"""

from __future__ import annotations

import torch


def compute_psr_nsr_outcome_advantage(token_level_rewards, token_level_scores, eos_mask, gamma, advantage, positive_advantage_weight):
    with torch.no_grad():
        returns = torch.zeros_like(token_level_rewards)
        running_return = 0
        correct_idx = token_level_scores.sum(-1) == 1
        incorrect_idx = token_level_scores.sum(-1) == 0

        for t in reversed(range(token_level_rewards.shape[1])):
            running_return = token_level_rewards[:, t] + gamma * running_return
            returns[:, t] = running_return
            # Reset after EOS
            running_return = running_return * eos_mask[:, t]

        if advantage == "positive":
            advantages = returns.clone()
        elif advantage == "negative":
            advantages = returns.clone() - 1
        elif advantage == "weighted":
            advantages = returns.clone()
            advantages[correct_idx] *= positive_advantage_weight
            advantages[incorrect_idx] -= 1
        else:
            raise ValueError(f"unknown advantage {advantage!r} (the authors raise NotImplementedError here)")
        advantages = advantages * eos_mask

    return advantages, returns
