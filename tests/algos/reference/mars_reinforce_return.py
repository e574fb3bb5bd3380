"""MARS's discounted token-level return as its authors compute it, transcribed for comparison.

Upstream: github.com/thu-nics/MARS, roll/utils/functionals.py, compute_reinforce_return, at commit
5979f75c8fa5354356a461805ed0a984cf3b2dfd (built on alibaba/ROLL, Apache License 2.0). Their env
manager (roll/agentic/rollout/env_manager.py) puts each turn's score on that turn's end-of-turn
token; the returns are then discounted position by position. Transcribed unchanged.
"""

from __future__ import annotations

import torch


def compute_reinforce_return(token_level_rewards: torch.Tensor, gamma: torch.Tensor, lambd: torch.Tensor):
    with torch.no_grad():
        advantages_reversed = []
        gen_len = token_level_rewards.shape[-1]
        cumulative_reward = 0
        for t in reversed(range(gen_len)):
            local_reward = token_level_rewards[:, t] if t < gen_len else 0.0
            cumulative_reward = local_reward + gamma * cumulative_reward
            advantages_reversed.append(cumulative_reward)
        advantages = torch.stack(advantages_reversed[::-1], dim=1)
        returns = advantages
    return advantages, returns
