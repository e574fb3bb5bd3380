"""Checkpoint and exact resume, with real subprocesses killed at arbitrary points.

Invariant 5: a run killed at any moment and resumed from its last checkpoint ends with the same
weights (bitwise, on this CPU with one thread) and the same metrics as the run never interrupted.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from reinforge.cli import main
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.runtime import checkpoint as ckpt
from run_records import assert_same_run, copy_at_first_checkpoint, final_weights

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


def snapshot(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.rglob("*") if p.is_file()}


def test_resuming_a_copy_writes_into_the_copy_and_leaves_the_run_untouched(tmp_path: Path, reference: Path, capsys) -> None:
    before = snapshot(reference)
    copy = tmp_path / "copy"
    shutil.copytree(reference, copy)  # `cp -a RUN COPY`, taken when RUN was at its first checkpoint:
    shutil.rmtree(copy / "final")
    for later in sorted((copy / "checkpoints").glob("step_*"))[1:]:
        shutil.rmtree(later)
    assert f"output_dir: {reference}" in (copy / "config.yaml").read_text()  # config.yaml still names RUN
    assert main(["train", "--resume", str(copy)]) == 0
    assert f"resuming {copy} after step 6" in capsys.readouterr().out  # the oldest checkpoint kept
    assert_same_run(copy, reference)
    assert snapshot(reference) == before
    assert f"output_dir: {copy}" in (copy / "config.yaml").read_text()


def test_a_moved_run_resumes_where_it_now_is(tmp_path: Path, reference: Path, capsys) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    copy_at_first_checkpoint(reference, old)  # a run at its first checkpoint, living in `old`
    old.rename(new)
    assert main(["train", "--resume", str(new)]) == 0
    assert f"resuming {new} after step 6" in capsys.readouterr().out  # not retrained from scratch at `old`
    assert not old.exists()
    assert_same_run(new, reference)


def test_a_forced_learning_rate_is_what_the_resumed_steps_use(tmp_path: Path, reference: Path, monkeypatch) -> None:
    copy = tmp_path / "copy"
    copy_at_first_checkpoint(reference, copy)
    saved_lr = ckpt.load_state(ckpt.list_checkpoints(copy)[0])["optimizer"]["param_groups"][0]["lr"]
    assert saved_lr != 0.05  # what the restored optimizer state would bring back
    rates: list[float] = []
    original = PolicyLearner.train_step

    def spy(self, batch, loss_fn):
        rates.append(self.optimizer.param_groups[0]["lr"])
        return original(self, batch, loss_fn)

    monkeypatch.setattr(PolicyLearner, "train_step", spy)
    assert main(["train", "--resume", str(copy), "--force", "algo.lr=0.05"]) == 0
    assert rates == [0.05, 0.05]  # RL steps 7 and 8, one optimizer step each
    assert "lr: 0.05" in (copy / "config.yaml").read_text()


class NoSpaceLeft(io.BytesIO):
    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_at_a_checkpoint_stops_with_the_intact_previous_then_resumes_exactly(
    tmp_path: Path, reference: Path, monkeypatch, capsys
) -> None:
    copy = tmp_path / "copy"
    copy_at_first_checkpoint(reference, copy)
    real = ckpt._create
    monkeypatch.setattr(ckpt, "_create", lambda path: NoSpaceLeft() if path.name == "state.pt" else real(path))
    assert main(["train", "--resume", str(copy)]) == 2
    err = capsys.readouterr().err
    step_6, step_8 = copy / "checkpoints" / "step_000006", copy / "checkpoints" / "step_000008"
    assert f"no space left on device while writing checkpoint {step_8}" in err
    assert f"previous checkpoint {step_6} is intact" in err and "Traceback" not in err
    assert [p.name for p in (copy / "checkpoints").iterdir()] == ["step_000006"]  # nothing partial left
    monkeypatch.setattr(ckpt, "_create", real)  # space freed
    assert main(["train", "--resume", str(copy)]) == 0
    assert_same_run(copy, reference)
