"""Reward shaping that depends on the response itself rather than on its correctness."""

from __future__ import annotations

from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


class OverlongPenalty:
    """DAPO's soft overlong punishment on the number of sampled tokens L:

        0                            if L <= L_max - L_cache
        ((L_max - L_cache) - L) / L_cache   if L_max - L_cache < L <= L_max
        -1                           if L > L_max

    Source: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (2025),
    eq. 13. A response cut off by the token budget (finish reason "length") gets -1, since its
    true length exceeds L_max.
    """

    def __init__(self, max_tokens: int, cache_tokens: int):
        if not 0 < cache_tokens <= max_tokens:
            raise ValueError(f"overlong penalty needs 0 < cache_tokens <= max_tokens, got {cache_tokens}, {max_tokens}")
        self.max_tokens = max_tokens
        self.cache_tokens = cache_tokens

    def __call__(self, task: Task, trajectory: Trajectory) -> float:
        length = trajectory.num_sampled_tokens
        if trajectory.finish_reason == "length" or length > self.max_tokens:
            return -1.0
        soft_start = self.max_tokens - self.cache_tokens
        return 0.0 if length <= soft_start else (soft_start - length) / self.cache_tokens
