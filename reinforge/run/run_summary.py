"""The table `reinforge train` prints at the end of a run: accuracy before and after RL, the reward curve, failures."""

from __future__ import annotations

from reinforge.config import Config
from reinforge.tasks.task import TaskSplits
from reinforge.telemetry import reward_curve_summary
from reinforge.telemetry.reward_failures import describe_reward_failures, reward_failure_totals
from reinforge.trainer.rl_loop import RLResult


def summary_rows(cfg: Config, tasks: TaskSplits, result: RLResult) -> list[tuple[str, str]]:
    before, after = result.evals[0], result.evals[-1]
    curve = reward_curve_summary(result.rewards)
    k = cfg.eval.samples
    return [
        ("held-out tasks", f"{len(tasks.eval)}"),
        ("greedy accuracy, warm start", f"{before['accuracy']:.1%}"),
        ("greedy accuracy, after RL", f"{after['accuracy']:.1%}  ({after['accuracy'] - before['accuracy']:+.1%})"),
        (f"mean@{k}, warm start -> after RL", f"{before[f'mean@{k}']:.1%} -> {after[f'mean@{k}']:.1%}"),
        *[
            (f"{name}, warm start -> after RL", f"{before[key]:.1%} -> {after[key]:.1%}")
            for key, name in (("tool_call_rate", "tool-call rate"), ("valid_call_rate", "valid-call rate"))
            if key in before
        ],
        ("reward, first 10% of steps", f"{curve['first_10pct_mean']:.3f}"),
        ("reward, last 10% of steps", f"{curve['last_10pct_mean']:.3f}"),
        ("reward, best 10-step average", f"{curve['max_moving_avg_10']:.3f}"),
        ("reward failures", describe_reward_failures(reward_failure_totals(result.steps))),
    ]


def several_policy_rows(cfg: Config, tasks: TaskSplits, result: RLResult) -> list[tuple[str, str]]:
    before, after = result.evals[0], result.evals[-1]
    curve = reward_curve_summary(result.rewards)
    rows = [("held-out games", f"{len(tasks.eval)}")]
    for name in cfg.policies:
        key = f"policy/{name}/accuracy"
        rows.append((f"{name}: not lost, warm start -> after RL", f"{before[key]:.1%} -> {after[key]:.1%}"))
    if "game/joint/win" in after:
        rows.append(("joint games won, warm start -> after RL", f"{before['game/joint/win']:.1%} -> {after['game/joint/win']:.1%}"))
    return rows + [
        ("reward, first 10% of steps", f"{curve['first_10pct_mean']:.3f}"),
        ("reward, last 10% of steps", f"{curve['last_10pct_mean']:.3f}"),
    ]
