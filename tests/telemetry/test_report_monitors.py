"""The training-health monitors in `reinforge report`: the header says which fired, at which steps
and whether one stopped the run; a timeline marks the firing steps; a detector that fired gets a
chart of the value it watched, its firing steps marked."""

from __future__ import annotations

import json

from reinforge.telemetry.report import write_report
from reinforge.telemetry.report_monitors import monitor_summary, spans


def health(step: int, **flags: float) -> dict:
    row = {"stage": "health", "step": step, "time": 1000.0 + step}
    for name, fired in flags.items():
        row[f"monitor/{name}"] = fired
        row[f"monitor/{name}/value"] = 0.5 + fired
    return row


def run_dir(tmp_path, stop_at: int | None):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"stage": "eval", "step": 0, "time": 1000.0, "accuracy": 0.3}]
    for step in range(1, 7):
        rows.append({"stage": "rl", "step": step, "time": 1000.0 + step, "reward": 0.1 * step, "entropy": 1.0})
        fired = 1.0 if step in (2, 3, 4, 6) else 0.0
        rows.append(health(step, entropy_collapse=fired, clip_spike=0.0))
        if step == stop_at:
            rows[-1]["monitor/stop"] = 1.0
            break
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_spans() -> None:
    assert spans([2, 3, 4, 6]) == "2-4, 6" and spans([]) == ""


def test_the_report_shows_what_fired_and_when(tmp_path) -> None:
    page = write_report(run_dir(tmp_path, None)).read_text()
    assert "<th>training-health monitors</th><td>entropy_collapse at steps 2-4, 6</td>" in page
    assert "Training-health monitors (red: fired)" in page  # the timeline
    assert "Monitor entropy_collapse: the value it watched" in page
    assert "Monitor clip_spike" not in page  # read, never fired: on the timeline only


def test_a_stopped_run_and_a_quiet_one(tmp_path) -> None:
    stopped = run_dir(tmp_path, 2)
    rows = [json.loads(line) for line in (stopped / "metrics.jsonl").read_text().splitlines()]
    assert monitor_summary(rows) == "entropy_collapse at step 2; the run stopped at step 2 (monitor.action=stop)"
    assert "stopped (step 2)" in write_report(stopped).read_text()
    quiet = [r for r in rows if r["stage"] != "health"] + [health(1, entropy_collapse=0.0, clip_spike=0.0)]
    assert monitor_summary(quiet) == "none fired (2 watched)"
    assert monitor_summary([r for r in rows if r["stage"] != "health"]) == "not run"
