"""`reinforge report`: the HTML page built from a hand-made run directory (no training)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from reinforge.cli import main
from reinforge.telemetry.report import write_report

CONFIG = "trainer:\n  seed: 3\n  steps: 4\nreward:\n  note: 'a < b & c'\n"
WORST_TRAIN = "<script>alert('pwned')</script> resp-s4-worst"


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def make_fake_run(root: Path) -> Path:
    """A run with 2 SFT steps, 4 RL steps (two named reward parts), evals at steps 0, 2 and 4."""
    run = root / "run"
    run.mkdir()
    (run / "config.yaml").write_text(CONFIG)
    rows, clock = [], 1000.0

    def log(stage: str, step: int, **metrics) -> None:
        nonlocal clock
        clock += 1.5
        rows.append({"stage": stage, "step": step, "time": clock, **metrics})

    log("sft", 1, loss=2.0)
    log("sft", 2, loss=1.2)
    log("eval", 0, **{"accuracy": 0.2, "mean@4": 0.25, "eval_tasks": 2.0})
    for step in range(1, 5):
        phases = {"rollout": 0.6, "reward": 0.1, "prepare": 0.2, "update": 0.5}
        log("rl", step, reward=0.2 * step, **{"reward/correct/mean": 0.15 * step, "reward/format/mean": 0.5 + 0.1 * step},
            entropy=1.5 - 0.1 * step, response_length=10.0 + step, kl_ref=0.01 * step, loss=0.3, tool_call_rate=0.1 * step,
            step_seconds=sum(phases.values()), tokens_per_s=100.0, **{f"time/{k}": v for k, v in phases.items()},
            **{"logprob_gap/abs_mean": 0.01 * step, "logprob_gap/abs_max": 0.1 * step, "logprob_gap/ratio_mean": 1.0,
               "logprob_gap/ratio_min": 0.9, "logprob_gap/ratio_max": 1.1})
        if step % 2 == 0:
            log("eval", step, **{"accuracy": 0.2 + 0.1 * step, "mean@4": 0.3 + 0.1 * step, "eval_tasks": 2.0})
    _jsonl(run / "metrics.jsonl", rows)

    def sample(step: int, response: str, reward: float) -> dict:
        return {"step": step, "task_id": f"t{step}", "group_id": step, "prompt": f"prompt at step {step}", "response": response,
                "reward": reward, "rewards": {"correct": reward, "format": 1.0}, "finish_reason": "stop",
                "policy_version": step - 1, "num_tokens": 7, "errors": []}

    _jsonl(run / "samples.jsonl", [
        sample(1, "resp-s1-a", 0.0), sample(1, "resp-s1-b", 1.0),
        sample(2, "resp-s2-low", 0.2), sample(2, "resp-s2-high", 0.9),
        sample(4, "resp-s4-best", 1.0), sample(4, WORST_TRAIN, 0.0), sample(4, "resp-s4-mid", 0.5),
    ])
    turns = [{"role": "policy", "text": "<tool_call>calc 6*7</tool_call>"}, {"role": "tool", "text": "tool-obs-42"},
             {"role": "env", "text": "env-says-done"}, {"role": "policy", "text": "final answer 42"}]
    _jsonl(run / "eval_samples.jsonl", [
        {"step": 0, "task_id": "e1", "prompt": "6*7=?", "answer": "42", "greedy": "eval-s0-wrong", "correct": False},
        {"step": 0, "task_id": "e2", "prompt": "1+1=?", "answer": "2", "greedy": "eval-s0-right", "correct": True},
        {"step": 2, "task_id": "e1", "prompt": "6*7=?", "answer": "42", "greedy": "eval-s2-wrong", "correct": False},
        {"step": 2, "task_id": "e2", "prompt": "1+1=?", "answer": "2", "greedy": "eval-s2-right", "correct": True},
        {"step": 4, "task_id": "e1", "prompt": "6*7=?", "answer": "42", "greedy": "final answer 42", "correct": True, "turns": turns},
        {"step": 4, "task_id": "e2", "prompt": "1+1=?", "answer": "2", "greedy": "eval-s4-wrong", "correct": False},
    ])
    return run


def test_report_has_plots_parts_config_and_escaped_text(tmp_path):
    run = make_fake_run(tmp_path)
    path = write_report(run)
    assert path == run / "report.html"
    page = path.read_text()

    # reward, held-out, KL, log-prob gap, importance ratio, entropy, length, tool-call rate, SFT loss, time split
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) == 10 and page.count("<svg") == 10
    titles = " ".join(re.findall(r"<!-- (.*?) -->", page))  # matplotlib names each text it draws as paths
    for label in ("reward (total)", "correct", "format", "mean@4", "KL to the reference", "Engine vs learner log-prob gap",
                  "Importance ratio learner / engine", "Tool-call rate", "rollout", "eval"):
        assert label in titles
    assert all('viewBox="' in svg for svg in svgs)
    assert "final held-out accuracy <b>0.600</b>" in page
    assert "seed: 3" in page and "a &lt; b &amp; c" in page  # the config, escaped
    # trajectories: multi-turn roles set apart, model text escaped (never live markup)
    assert 'class="turn turn-tool"' in page and "tool-obs-42" in page and "env-says-done" in page
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in page
    assert "<script>alert" not in page and "<tool_call>" not in page
    assert page.count("<script") == 1  # only the browser's own inline script
    # self-contained: nothing loaded from elsewhere (the fake run holds no URL at all)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "http://" not in page and "https://" not in page


def test_report_output_path_and_views_per_step(tmp_path):
    run = make_fake_run(tmp_path)
    out = write_report(run, tmp_path / "elsewhere" / "r.html")
    page = out.read_text()
    assert out.exists() and not (run / "report.html").exists()
    for step in (0, 2, 4):
        assert f'<option value="{step}"' in page
        for pick in ("best", "worst", "random"):
            assert f'data-step="{step}" data-pick="{pick}"' in page
    # only the last step's "best" view is visible before any script runs
    assert page.count('class="view"') == 9 and page.count(" hidden>") == 8


def test_report_without_optional_files(tmp_path):
    run = tmp_path / "bare"
    run.mkdir()
    _jsonl(run / "metrics.jsonl", [{"stage": "rl", "step": 1, "time": 1.0, "reward": 0.5, "step_seconds": 2.0}])
    page = write_report(run).read_text()
    assert page.count("<svg") == 2  # reward and (undivided) time per step
    assert "not evaluated" in page and "No trajectories" in page


def test_cli_report(tmp_path, capsys):
    run = make_fake_run(tmp_path)
    assert main(["report", str(run), "--output", str(tmp_path / "cli.html")]) == 0
    assert (tmp_path / "cli.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "has no metrics.jsonl" in capsys.readouterr().err
