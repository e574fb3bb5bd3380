"""`reinforge report` counts what the run did and times it as the console did.

The SFT step count comes from the step numbers logged (every 10th step and the last), not from the
number of rows; the phase times are the logged `time/*` values, the step-0 evaluation included, so
they match the console's end-of-run summary; and the time chart's y axis holds its tallest bar.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from reinforge.cli import main
from reinforge.telemetry.report import phase_seconds, read_records, write_report
from reinforge.telemetry.report_plots import time_figure


def facts(page: str) -> dict[str, str]:
    return dict(re.findall(r"<tr><th>([^<]*)</th><td>([^<]*)</td></tr>", page))


def write_run(run: Path, sft_logged: list[int], sft_steps: int) -> Path:
    run.mkdir()
    (run / "config.yaml").write_text(f"sft:\n  steps: {sft_steps}\ntrainer:\n  seed: 0\n")
    rows = [{"stage": "sft", "step": s, "time": 1.0, "loss": 1.0, "time/sft": 0.01 * (s + 1)} for s in sft_logged]
    rows.append({"stage": "eval", "step": 0, "time": 2.0, "accuracy": 0.1, "time/eval": 4.0})
    rows.append({"stage": "rl", "step": 1, "time": 3.0, "reward": 0.5, "time/rollout": 1.0, "time/update": 1.0})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_sft_steps_are_counted_from_the_logged_step_numbers(tmp_path) -> None:
    # A 2,000-step warm-up logs steps 0, 10, ..., 1990 and 1999: 201 rows, 2,000 steps.
    logged = [*range(0, 2000, 10), 1999]
    assert len(logged) == 201
    page = write_report(write_run(tmp_path / "done", logged, 2000)).read_text()
    assert facts(page)["SFT steps"] == "2000"
    assert facts(page)["time: sft"] == "20.0 s"  # the last record's time/sft
    # Stopped at step 1234 or so: the last logged step is 1230, so at least 1231 were taken.
    page = write_report(write_run(tmp_path / "stopped", [*range(0, 1231, 10)], 2000)).read_text()
    assert facts(page)["SFT steps"] == "at least 1231 of 2000 (the warm-up stopped early)"
    page = write_report(write_run(tmp_path / "none", [], 0)).read_text()
    assert facts(page)["SFT steps"] == "0"


def test_the_step_zero_evaluation_is_in_the_phase_times(tmp_path) -> None:
    run = write_run(tmp_path / "run", [0], 1)
    assert phase_seconds(read_records(run / "metrics.jsonl"))["eval"] == [(0, 4.0)]
    page = write_report(run).read_text()
    assert facts(page)["time in RL steps and evaluation"] == "6.0 s"
    assert facts(page)["time: eval"] == "4.0 s (67%)"


def console_rows(text: str) -> dict[str, str]:
    """The rows of the rich summary table printed at the end of `reinforge train`."""
    return {m[0].strip(): m[1].strip() for m in re.findall(r"│([^│]+)│([^│]+)│", text)}


def test_report_times_match_the_console_summary(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    tiny = ["model.preset=nano", "task.train_size=16", "task.eval_size=4", "rollout.prompts_per_step=2",
            "rollout.group_size=2", "trainer.steps=2", "eval.every=1", "eval.samples=1", "sft.steps=12",
            "telemetry.progress=false", "telemetry.tensorboard=false"]
    assert main(["train", "--output", str(run), *tiny]) == 0
    console = console_rows(capsys.readouterr().out)
    page = write_report(run).read_text()
    shown = facts(page)
    assert shown["SFT steps"] == "12"
    assert "eval" in console and console["sft"].endswith(" s")
    for phase in ("sft", "rollout", "reward", "prepare", "update", "eval"):
        if phase in console:  # phases that took no measurable time are left out of both
            assert shown[f"time: {phase}"] == console[phase], phase
    steps_with_eval = [step for step, _ in phase_seconds(read_records(run / "metrics.jsonl"))["eval"]]
    assert steps_with_eval == [0, 1, 2]


@pytest.mark.parametrize("tallest_step_has_eval", [False, True])
def test_time_chart_axis_holds_the_tallest_bar_and_its_label(tallest_step_has_eval) -> None:
    # Step 2 is the tallest (4 s). Without an eval segment on it, the empty top segment used to pin
    # the axis at exactly 4.0 (a sticky edge), cutting the bar at the frame.
    per_step = {
        "rollout": [(1, 1.0), (2, 3.0), (3, 1.0)],
        "update": [(1, 1.0), (2, 1.0), (3, 1.0)],
        "eval": [(0, 0.5), (2, 0.5)] if tallest_step_has_eval else [(0, 0.5), (1, 1.0)],
    }
    tallest = 4.5 if tallest_step_has_eval else 4.0
    fig = time_figure(per_step)
    ax = fig.axes[0]
    assert ax.get_ylim()[1] > tallest
    (label,) = ax.texts
    assert label.get_text() == f"{tallest:.3g} s"
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    inside, text = ax.get_window_extent(renderer), label.get_window_extent(renderer)
    assert inside.y0 < text.y0 and text.y1 <= inside.y1  # the whole label sits within the axes
    # the bar tops: every stacked segment ends at or below the tallest total, which is drawn
    tops = [patch.get_y() + patch.get_height() for patch in ax.patches]
    assert max(tops) == pytest.approx(tallest)
