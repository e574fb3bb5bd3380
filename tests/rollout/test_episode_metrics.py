"""Episode metrics: the tool env's rates only where the env runs tools, and an env's own counts as env/<key>."""

from __future__ import annotations

from reinforge.rollout.episode_metrics import episode_metrics
from reinforge.rollout.trajectory import Trajectory


def episode(turns: int, stats: dict, finish_reason: str = "stop") -> Trajectory:
    spans = [(2 + 2 * i, 3 + 2 * i) for i in range(turns)]
    length = 2 + 2 * turns
    return Trajectory(
        task_id="t", group_id=0, token_ids=list(range(length)), loss_mask=[False] * length,
        behaviour_logprobs=[0.0] * length, turn_spans=spans, prompt_length=2, response_text="",
        policy_version=0, finish_reason=finish_reason, stats=stats,
    )


def test_a_game_env_gets_its_own_counts_and_no_tool_rates() -> None:
    games = [episode(3, {"solved": 1, "wrong_guesses": 2}), episode(5, {"wrong_guesses": 5}, "max_turns")]
    metrics = episode_metrics(games, tools=False)
    assert metrics["env/solved"] == 0.5 and metrics["env/wrong_guesses"] == 3.5
    assert metrics["turns"] == 4.0 and metrics["finish/max_turns"] == 0.5
    assert not any(key.startswith(("tool_", "valid_", "void_")) for key in metrics)


def test_a_tool_env_that_never_calls_a_tool_shows_flat_zero_rates() -> None:
    answered = [episode(1, {"void_turns": 0}), episode(2, {"tool_calls": 0, "valid_calls": 0, "tool_errors": 0})]
    metrics = episode_metrics(answered, tools=True)
    assert metrics["tool_call_rate"] == 0.0 and metrics["valid_call_rate"] == 0.0
    assert not any(key.startswith("env/") for key in metrics)  # the tool counters are not repeated as env/
