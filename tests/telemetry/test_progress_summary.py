from __future__ import annotations

import io

import pytest
from rich.console import Console

from reinforge.telemetry import ProgressDisplay, render_summary, reward_curve_summary, time_split
from reinforge.telemetry.progress import format_key_metrics


def test_live_progress_renders_bar_and_metrics():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, force_interactive=True, width=160)
    with ProgressDisplay(total=4, description="RL", console=console) as progress:
        assert progress.live
        for step in range(1, 5):
            progress.update(step, {"reward": 0.5, "loss": 0.25, "ignored": 9.0})
    output = buffer.getvalue()
    assert "4/4" in output
    assert "reward 0.500" in output and "loss 0.2500" in output
    assert "ignored" not in output


def test_disabled_progress_prints_plain_status_every_tenth(capsys):
    with ProgressDisplay(total=100, description="RL", enabled=False) as progress:
        assert not progress.live
        for step in range(1, 101):
            metrics = {"reward": step / 100, "tokens_per_s": 1234.0}
            if step == 50:
                metrics["accuracy"] = 0.75
            progress.update(step, metrics)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0] for line in lines] == [
        "RL 1/100 (1%)",
        *(f"RL {step}/100 ({step}%)" for step in range(10, 101, 10)),
    ]
    assert "reward 1.000" in lines[-1] and "tok/s 1,234" in lines[-1]
    assert "held-out acc 0.750" in lines[-1]  # kept from the last evaluation
    assert "\x1b" not in "".join(lines)  # no escape codes in logs


def test_disabled_progress_prints_where_a_stopped_run_ended(capsys):
    with ProgressDisplay(total=100, description="SFT", enabled=False) as progress:
        for step in range(1, 16):
            progress.update(step, {"loss": 1.0})
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0] for line in lines] == ["SFT 1/100 (1%)", "SFT 10/100 (10%)", "SFT 15/100 (15%)"]


def test_format_key_metrics_shows_only_present_fields():
    assert format_key_metrics({"loss": 0.5}) == "loss 0.5000"
    assert format_key_metrics({}) == ""


def test_reward_curve_summary_hand_computed():
    rewards = [float(i) for i in range(20)]  # 0, 1, ..., 19
    rewards[5] = 30.0  # one lucky step raises windows 0..5
    summary = reward_curve_summary(rewards)
    assert summary["steps"] == 20
    assert summary["first_10pct_mean"] == pytest.approx((0 + 1) / 2)  # ceil(20 / 10) = 2 steps
    assert summary["last_10pct_mean"] == pytest.approx((18 + 19) / 2)
    # Windows i..i+9 without the spike have mean i + 4.5 (best: i=10 -> 14.5); with the spike
    # (i <= 5) the mean gains 25 / 10 = 2.5, at most 5 + 4.5 + 2.5 = 12. So the best is 14.5.
    assert summary["max_moving_avg_10"] == pytest.approx(14.5)


def test_reward_curve_summary_short_and_empty():
    short = reward_curve_summary([1.0, 0.0, 2.0])
    assert short == {"first_10pct_mean": 1.0, "last_10pct_mean": 2.0, "max_moving_avg_10": 1.0, "steps": 3}
    empty = reward_curve_summary([])
    assert empty["steps"] == 0


def test_time_split_percentages():
    rows = time_split({"rollout": 27.0, "learner": 9.0, "eval": 0.0, "other": 24.0})
    assert rows == [
        ("rollout", "27.0 s (45%)"),
        ("learner", "9.0 s (15%)"),
        ("eval", "0.0 s (0%)"),
        ("other", "24.0 s (40%)"),
    ]
    assert time_split({"idle": 0.0}) == [("idle", "0.0 s (0%)")]


def test_render_summary_has_title_and_rows():
    text = render_summary([("steps", "20"), ("reward (last 10%)", "0.81")], title="RL run")
    assert "RL run" in text
    assert "quantity" in text and "value" in text
    assert "reward (last 10%)" in text and "0.81" in text
    assert "\x1b" not in text
