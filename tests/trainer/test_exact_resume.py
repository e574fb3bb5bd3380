"""Checkpoint and exact resume, with real subprocesses killed at arbitrary points.

Invariant 5: a run killed at any moment and resumed from its last checkpoint ends with the same
weights (bitwise, on this CPU with one thread) and the same metrics as the run never interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from reinforge.cli import main
from run_records import assert_same_run, final_weights

TINY = [
    "model.preset=nano", "task.train_size=200", "task.eval_size=16", "sft.steps=150", "sft.lr=0.003",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "trainer.steps=8", "eval.every=3", "eval.samples=2",
    "trainer.checkpoint_every=2", "telemetry.progress=false",
]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "reinforge.cli", *args]


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(command(*args), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args), env=ENV, capture_output=True, text=True, timeout=timeout)


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, f"run ended before {path} appeared: {process.communicate()}"
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "run"
    done = run("train", "--output", str(out), *TINY)
    assert done.returncode == 0, done.stderr
    return out


def test_reference_run_learns_something(reference: Path) -> None:
    # Guard against a vacuous comparison: RL really changed the warm-start weights.
    warm = load_file(reference / "warm_start" / "model.safetensors")
    final = final_weights(reference)
    assert any(not torch.equal(warm[k], final[k]) for k in warm)


def test_sigkill_at_several_points_then_resume_matches(tmp_path: Path, reference: Path) -> None:
    out = tmp_path / "run"
    # 1. killed during the warm-up, before any checkpoint: resume starts over.
    process = start("train", "--output", str(out), *TINY)
    wait_for(out / "metrics.jsonl", process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (out / "checkpoints").exists()
    # 2. resumed, then killed again right after the step-4 checkpoint lands.
    process = start("train", "--resume", str(out))
    wait_for(out / "checkpoints" / "step_000004", process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    # 3. resumed to the end.
    done = run("train", "--resume", str(out))
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stdout
    assert_same_run(out, reference)


def test_sigterm_stops_cleanly_with_a_checkpoint(tmp_path: Path, reference: Path) -> None:
    out = tmp_path / "run"
    process = start("train", "--output", str(out), *TINY, "trainer.checkpoint_every=0")
    wait_for(out / "samples.jsonl", process)  # RL has started
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "stopped by SIGTERM" in stderr and "--resume" in stderr
    assert len(list((out / "checkpoints").glob("step_*"))) == 1
    done = run("train", "--resume", str(out))
    assert done.returncode == 0, done.stderr
    assert_same_run(out, reference)


def test_corrupt_checkpoint_names_the_file_and_offers_the_previous(tmp_path: Path, reference: Path, capsys) -> None:
    out = tmp_path / "run"
    for name in ("config.yaml", "metrics.jsonl", "samples.jsonl", "eval_samples.jsonl"):
        if (reference / name).exists():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes((reference / name).read_bytes())
    import shutil

    shutil.copytree(reference / "checkpoints", out / "checkpoints")
    newest, previous = sorted((out / "checkpoints").glob("step_*"))[::-1][:2]
    state = newest / "state.pt"
    state.write_bytes(state.read_bytes()[:-10] + b"corrupted!")
    (out / "config.yaml").write_text((out / "config.yaml").read_text().replace(str(reference), str(out)))

    assert main(["train", "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(state) in err and "corrupt" in err and str(previous) in err and "--checkpoint" in err


def test_resume_with_a_changed_config_is_refused_unless_forced(reference: Path, capsys) -> None:
    assert main(["train", "--resume", str(reference), "algo.lr=0.5"]) == 2
    err = capsys.readouterr().err
    assert "algo.lr" in err and "--force" in err
