"""ReMax (greedy-rollout baseline), transcribed from verl for comparison (plain torch).

Upstream: github.com/volcengine/verl, verl/trainer/ppo/core_algos.py, compute_remax_outcome_advantage, at commit
b178a3cd56f58b2d502255daba591e92833930a7. Copyright 2024 Bytedance Ltd. and/or its affiliates; licensed under the Apache
License, Version 2.0. The functions are copied unchanged but for the registration decorator and the
config's type hint (Optional[AlgoConfig] -> Optional[dict]).
"""

from __future__ import annotations

from typing import Optional

import torch


def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
    config: Optional[dict] = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    Compute advantage for ReMax, operating only on Outcome reward
    This implementation is based on the paper: https://arxiv.org/abs/2310.10505
    (with only one scalar reward for each response).

    Args:
        token_level_rewards: `(torch.Tensor)`
            shape: (bs, response_length)
        reward_baselines: `(torch.Tensor)`
            shape: (bs,)
        response_mask: `(torch.Tensor)`
            shape: (bs, response_length)
        config: (AlgoConfig) algorithm config

    Returns:
        advantages: `(torch.Tensor)`
            shape: (bs, response_length)
        Returns: `(torch.Tensor)`
            shape: (bs, response_length)
    """

    with torch.no_grad():
        returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
        advantages = returns - reward_baselines.unsqueeze(-1) * response_mask

    return advantages, returns
