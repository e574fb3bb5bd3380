"""`reinforge report` draws the prompt-value model's calibration: Brier score per step and the reliability curve."""

from __future__ import annotations

import re

from reinforge.telemetry.report import plots, reliability_points


def value_rows() -> list[dict]:
    """Four RL steps that logged only the value model's metrics (cumulative reliability counts)."""
    rows = []
    for step in range(1, 5):
        rows.append({
            "stage": "rl", "step": step, "value/brier": 0.2 - 0.02 * step, "value/brier_constant": 0.22,
            "value/reliability/pred_1": 0.12, "value/reliability/obs_1": 0.1, "value/reliability/n_1": 8.0 * step,
            "value/reliability/pred_6": 0.64, "value/reliability/obs_6": 0.7, "value/reliability/n_6": 4.0 * step,
        })
    return rows


def test_the_reliability_curve_is_the_last_steps_cumulative_one():
    assert reliability_points(value_rows()) == [(0.12, 0.1, 32.0), (0.64, 0.7, 16.0)]
    assert reliability_points([{"stage": "rl", "step": 1, "reward": 0.5}]) == []  # a run without the value model


def test_report_plots_include_brier_and_reliability_charts():
    svgs = plots(value_rows())  # every other chart has no data here and is left out
    assert len(svgs) == 2
    titles = " ".join(re.findall(r"<!-- (.*?) -->", "".join(svgs)))  # matplotlib names each text it draws
    for label in ("Prompt-value model: Brier score", "batch pass rate as a constant", "Prompt-value model reliability", "32"):
        assert label in titles
