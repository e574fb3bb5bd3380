"""`benchmarks/vs_trl.py --model DIR`: both frameworks in processes of their own, on the same work.

The slow test runs the whole harness on a tiny model saved as a plain HF directory (the real model's
run is in docs/real_model.md); the fast ones check the guard that refuses unequal work.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)

from vs_trl_real import check_same_work  # noqa: E402


class Args:
    tasks, group_size, new_tokens = 2, 2, 4


def step(prompts, lengths):
    return {"prompt_ids": prompts, "completion_lengths": lengths}


def test_same_work_passes_identical_steps():
    check_same_work(Args, [step([[1, 2], [3]], [4] * 4)], [step([[1, 2], [3]], [4] * 4)])


def test_different_prompt_ids_are_refused():
    with pytest.raises(RuntimeError, match="prompt token ids differ"):
        check_same_work(Args, [step([[1, 2], [3]], [4] * 4)], [step([[1, 2], [3, 3]], [4] * 4)])


def test_a_completion_that_stopped_early_is_refused():
    with pytest.raises(RuntimeError, match=r"TRL sampled 4 completions of 3-4 tokens, expected 4 of 4"):
        check_same_work(Args, [step([[1]], [4] * 4)], [step([[1]], [4, 4, 3, 4])])


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="needs TRL (pip install -e '.[bench]')")
def test_harness_runs_both_sides_on_a_saved_model(tmp_path):
    from reinforge.config import load_config
    from reinforge.run.pipeline import build_policy
    from reinforge.tasks.registry import load_tasks

    cfg = load_config("default", ["model.preset=nano"])
    model, tokenizer = build_policy(cfg, load_tasks(cfg.task, seed=cfg.trainer.seed))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    out = tmp_path / "result.json"
    run = subprocess.run(
        [sys.executable, "vs_trl.py", "--model", str(tmp_path / "model"), "--tasks", "2", "--group-size", "2",
         "--new-tokens", "4", "--pairs", "1", "--micro-batch", "2", "--json", str(out)],
        cwd=BENCHMARKS, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(out.read_text())
    for side in ("reinforge_steps", "trl_steps"):
        assert len(result[side]) == 2  # the warm-up and one timed step
        assert all(length == 4 for s in result[side] for length in s["completion_lengths"])
        assert all(s["phases"]["reference"] > 0 and s["step_peak_rss"] > 0 for s in result[side])
    assert result["reinforge_steps"][0]["prompt_ids"] == result["trl_steps"][0]["prompt_ids"]
    assert result["peak_rss"]["reinforge"] > 0 and result["peak_rss"]["trl"] > 0
    assert "peak RSS: reinforge" in run.stdout and "RL step: reinforge" in run.stdout
