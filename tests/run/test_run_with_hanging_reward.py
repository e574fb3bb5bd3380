"""A whole run whose verifier holds the GIL forever (a catastrophic-backtracking regex in a JSONL
task, the reported case) finishes, counts and drops the failed samples, and the interpreter
exits promptly with no reward worker left behind (it used to hang, also after a finished run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

GENEROUS_S = 240  # a bound on hanging, not a timing: the run itself takes seconds


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # gone, or not ours to read
                pass
    return found


def test_run_with_a_gil_holding_verifier_finishes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    # Matching takes exponential time in the response's length while holding the GIL.
    records = [{"prompt": f"{i}: say Z", "answer": "Z", "verifier": "regex", "pattern": "(.*.*.*)*Z"} for i in range(16)]
    tasks.write_text("".join(json.dumps(r) + "\n" for r in records))
    marker = f"REINFORGE_HANG_TEST={uuid.uuid4().hex}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", marker.split("=")[0]: marker.split("=")[1]}
    done = subprocess.run(
        [
            sys.executable, "-m", "reinforge.cli", "train", "task.source=jsonl", f"task.path={tasks}", "task.eval_size=2",
            "model.preset=nano", "sft.steps=0", "rollout.prompts_per_step=2", "rollout.group_size=2",
            "rollout.max_new_tokens=24", "trainer.steps=1", "eval.samples=1", "reward.timeout_s=1",
            "reward.max_error_fraction=1.0", "telemetry.progress=false", "telemetry.tensorboard=false",
            f"trainer.output_dir={tmp_path / 'run'}",
        ],
        env=env, capture_output=True, text=True, timeout=GENEROUS_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert processes_with(marker) == [], "a reward worker outlived the run"
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if r.get("stage") == "rl")
    # Some of the random untrained model's responses are long enough to hang the regex: they are
    # failed (timeout, blamed on the verifier component), counted, and left out of the loss.
    failed = step.get("reward_failed/correct/timeout", 0.0)
    assert failed >= 1 and step["reward_errors"] == failed
    assert step["reward_dropped"] >= failed  # with their groups (grpo)
    assert "reward failures" in done.stdout and "(correct: timeout" in done.stdout
    assert any(r.get("stage") == "eval" and "verify_errors" in r for r in rows)
