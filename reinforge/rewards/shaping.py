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

    deterministic = True  # reads only the finish reason and token count, both in the scorer's cache key

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


class LengthPenalty:
    """A linear penalty on the number of sampled tokens L beyond a target:

        -per_token * max(0, L - target_tokens)
    """

    def __init__(self, target_tokens: int, per_token: float):
        if target_tokens < 0 or per_token < 0:
            raise ValueError(f"length penalty needs target_tokens >= 0 and per_token >= 0, got {target_tokens}, {per_token}")
        self.target_tokens = target_tokens
        self.per_token = per_token

    def __call__(self, task: Task, trajectory: Trajectory) -> float:
        return -self.per_token * max(0, trajectory.num_sampled_tokens - self.target_tokens)


# Process-reward helpers: pure functions on one trajectory's per-step rewards (a list, step 0 first).


def clip_process_rewards(step_rewards: list[float], upper: float = 0.0) -> list[float]:
    """The "Clip" fix for process-reward hacking:

        r'_t = min(r_t, upper),   upper <= 0

    Every shaped step reward is <= upper <= 0, so the cumulative process reward sum_t r'_t is
    bounded above by 0 (by T * upper): adding more steps can never raise it, which removes the
    incentive to pad a solution with extra "good-looking" steps.

    Source: Gao et al., "On Designing Effective RL Reward at Training Time for LLM Reasoning"
    (2024), Clip mechanism, which writes it as min(PRM_t - eta, 0). That is this function applied
    to r_t = PRM_t - eta with upper = 0 (the caller subtracts its threshold eta first). Cheng et
    al., "Stop Summation: Min-Form Credit Assignment Is All Process Reward Model Needs for
    Reasoning" (PURE, 2025) discuss this fix as a baseline against min-form credit assignment.
    """
    if upper > 0:
        raise ValueError(f"clip_process_rewards needs upper <= 0 to bound the cumulative reward, got {upper}")
    return [min(float(r), upper) for r in step_rewards]


def delta_process_rewards(step_rewards: list[float]) -> list[float]:
    """The "Delta" fix for process-reward hacking:

        d_t = r_t - r_{t+1}   for t < T,      d_T = 0   (the last step's reward is dropped)

    so sum_t d_t telescopes to r_0 - r_T: bounded by the reward range whatever the number of
    steps, while each step is still credited with how much better it is than the next one.

    Source: Gao et al., "On Designing Effective RL Reward at Training Time for LLM Reasoning"
    (2024), Delta mechanism.
    """
    rewards = [float(r) for r in step_rewards]
    return [rewards[t] - rewards[t + 1] for t in range(len(rewards) - 1)] + ([0.0] if rewards else [])


def potential_based_shaping(potentials: list[float], gamma: float = 1.0) -> list[float]:
    """Potential-based shaping terms for states s_0 .. s_T with potentials Phi(s_t):

        F_t = gamma * Phi(s_{t+1}) - Phi(s_t),   t = 0 .. T-1

    so sum_t gamma^t F_t = gamma^T Phi(s_T) - Phi(s_0): adding F to the reward leaves the optimal
    policy unchanged. Returns T terms for T + 1 potentials.

    Source: Ng, Harada and Russell, "Policy invariance under reward transformations: theory and
    application to reward shaping" (ICML 1999).
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"potential_based_shaping needs 0 <= gamma <= 1, got {gamma}")
    phi = [float(p) for p in potentials]
    return [gamma * phi[t + 1] - phi[t] for t in range(len(phi) - 1)]


def gated_step_rewards(step_rewards: list[float], outcome: float, threshold: float) -> list[float]:
    """Gated reward accumulation (G-RA): step rewards count only when the outcome succeeds.

        r'_t = r_t   if outcome >= threshold,   else 0

    A trajectory with a failed outcome cannot collect process rewards, so the policy cannot trade
    the outcome for many cheap, well-scored intermediate steps.

    Source: the gated reward accumulation idea of "Stabilizing Long-term Multi-turn Reinforcement
    Learning with Gated Rewards" (2025, arXiv:2508.10548): immediate rewards are accumulated only when
    the higher-level (outcome) reward meets a threshold.
    """
    if outcome >= threshold:
        return [float(r) for r in step_rewards]
    return [0.0 for _ in step_rewards]
