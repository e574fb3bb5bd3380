"""Reward failures over a run, as the end-of-run summary and the report show them."""

from __future__ import annotations

from reinforge.telemetry.reward_failures import describe_reward_failures, reward_failure_totals


def test_failures_are_summed_per_component_and_reason() -> None:
    steps = [
        {"reward_errors": 0.0, "reward_dropped": 0.0},
        {"reward_errors": 4.0, "reward_failed/slow/timeout": 4.0, "reward_dropped": 8.0},
        {"reward_errors": 3.0, "reward_failed/slow/timeout": 1.0, "reward_failed/correct/raised": 2.0, "reward_dropped": 3.0},
    ]
    totals = reward_failure_totals(steps)
    assert totals["failed"] == 7 and totals["dropped"] == 11
    assert dict(totals["causes"]) == {("slow", "timeout"): 5.0, ("correct", "raised"): 2.0}
    assert describe_reward_failures(totals) == "7 samples (correct: raised 2; slow: timeout 5); 11 left out of the loss"
    assert describe_reward_failures(reward_failure_totals(steps[:1])) == "none"
