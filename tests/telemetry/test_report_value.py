"""`reinforge report` draws the prompt-value model's calibration: Brier score per step and the reliability curve."""

from __future__ import annotations

import json
import re

from reinforge.telemetry.report import reliability_points, write_report
from test_report import make_fake_run


def add_value_metrics(run) -> None:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for r in rows:
        if r["stage"] == "rl":
            r.update({"value/brier": 0.2 - 0.02 * r["step"], "value/brier_constant": 0.22})
            r.update({"value/reliability/pred_1": 0.12, "value/reliability/obs_1": 0.1, "value/reliability/n_1": 8.0 * r["step"]})
            r.update({"value/reliability/pred_6": 0.64, "value/reliability/obs_6": 0.7, "value/reliability/n_6": 4.0 * r["step"]})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_draws_brier_and_the_last_steps_reliability_curve(tmp_path):
    run = make_fake_run(tmp_path)
    add_value_metrics(run)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert reliability_points(rows) == [(0.12, 0.1, 32.0), (0.64, 0.7, 16.0)]  # step 4's cumulative counts
    page = write_report(run).read_text()
    assert page.count("<svg") == 12  # the 10 of a run without the value model, and these two
    titles = " ".join(re.findall(r"<!-- (.*?) -->", page))
    for label in ("Prompt-value model: Brier score", "batch pass rate as a constant", "Prompt-value model reliability", "32"):
        assert label in titles


def test_a_run_without_the_value_model_has_no_value_charts(tmp_path):
    page = write_report(make_fake_run(tmp_path)).read_text()
    assert "Prompt-value" not in page
