"""Which samples were cut by a token limit, for `algo.mask_truncated`.

A response that hit the engine's limit (finish reason "length", rollout.max_new_tokens) or an
episode that ran out of its token budget ("max_tokens", env.max_episode_tokens or the context)
never reached its end: its reward judges an unfinished answer, so DAPO (Yu et al. 2025, "DAPO:
An Open-Source LLM Reinforcement Learning System at Scale", overlong filtering) leaves it out of
the loss; TRL's `mask_truncated_completions` does the same from the last token (not EOS). Its
reward still counts in its group's baseline, as it was sampled alongside the rest.
"""

from __future__ import annotations

import torch

from reinforge.rollout.trajectory import Trajectory

TRUNCATED_FINISH_REASONS = ("length", "max_tokens")


def truncated_rows(trajectories: list[Trajectory]) -> torch.Tensor:
    """[N] bool: the samples a token limit cut short."""
    return torch.tensor([t.finish_reason in TRUNCATED_FINISH_REASONS for t in trajectories], dtype=torch.bool)
