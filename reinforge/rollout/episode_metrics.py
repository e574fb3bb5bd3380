"""What a batch of episodes did: finish reasons, turns, and tool use, as rates people can plot.

`tool_call_rate` is the fraction of episodes that called a tool at least once; `valid_call_rate`
the fraction of calls that parsed, named a known tool and ran without error. A tool setting that
silently never calls a tool shows up here as a flat zero, not as nothing at all.
"""

from __future__ import annotations

from collections import Counter

from reinforge.rollout.trajectory import Trajectory

FINISH_REASONS = ("stop", "length", "max_turns", "max_tokens", "error")


# The tool env's counters, reported as the rates above; any other numeric count an env puts in
# StepResult.info (a user's env, an adapter's env_reward) is logged as env/<key> per episode.
TOOL_COUNTERS = frozenset({"tool_calls", "valid_calls", "tool_errors", "void_turns"})


def episode_metrics(trajectories: list[Trajectory], tools: bool = True) -> dict[str, float]:
    """`tools`: the env runs tools (the tool env, TRL's), so its tool rates are reported even when
    flat at zero; an env without tools (a user's game) gets none of them."""
    n = len(trajectories)
    if n == 0:
        return {}
    reasons = Counter(t.finish_reason for t in trajectories)
    metrics = {"stop_frac": reasons["stop"] / n}
    if all(t.num_turns <= 1 and not t.stats for t in trajectories):
        return metrics  # single-turn: nothing more to say
    metrics.update({f"finish/{r}": reasons[r] / n for r in FINISH_REASONS if r != "stop"})
    metrics["turns"] = sum(t.num_turns for t in trajectories) / n
    for key in sorted({k for t in trajectories for k in t.stats} - TOOL_COUNTERS):
        metrics[f"env/{key}"] = sum(t.stats.get(key, 0) for t in trajectories) / n
    if not tools:
        return metrics
    calls = sum(t.stats.get("tool_calls", 0) for t in trajectories)
    valid = sum(t.stats.get("valid_calls", 0) for t in trajectories)
    metrics["tool_call_rate"] = sum(t.stats.get("tool_calls", 0) > 0 for t in trajectories) / n
    metrics["tool_calls_per_episode"] = calls / n
    metrics["valid_call_rate"] = valid / calls if calls else 0.0
    metrics["tool_errors_per_episode"] = sum(t.stats.get("tool_errors", 0) for t in trajectories) / n
    metrics["void_turn_frac"] = sum(t.stats.get("void_turns", 0) for t in trajectories) / max(
        1, sum(t.num_turns for t in trajectories)
    )
    return metrics


def step_metrics(trajectories: list[Trajectory], rollout_seconds: float, phases: dict[str, float],
                 tools: bool = True) -> dict[str, float]:
    """What every RL step logs about its rollouts and its time (the one-policy and the several-policy
    loops alike): response length, the episode rates above, sampling speed, seconds per phase."""
    sampled_tokens = sum(t.num_sampled_tokens for t in trajectories)
    return {
        "response_length": sampled_tokens / len(trajectories),
        **episode_metrics(trajectories, tools=tools),
        "tokens_per_s": sampled_tokens / max(rollout_seconds, 1e-9),
        "step_seconds": sum(phases.values()),
        **{f"time/{key}": seconds for key, seconds in phases.items()},
    }
