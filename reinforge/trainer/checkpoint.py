"""Checkpoints of a whole RL run, written atomically, verified on load, the last K kept.

A checkpoint is a directory `checkpoints/step_NNNNNN/` holding the policy in Hugging Face format
(`model/`), and `state.pt` with everything else the loop carries: optimizer, learner version,
reference and critic, the task sampler's cursor and RNG, the mini-batch shuffle generator, the
global RNG states, the results so far and the byte length of every log file at that step (so a
resumed run rewrites exactly what an uninterrupted one would). It is written under a temporary
name and renamed into place last, with a manifest of file sizes and SHA-256 digests, so a crash
while writing never leaves a directory that looks like a valid checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch

from reinforge.trainer.run_errors import CheckpointError

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
LOG_FILES = ("metrics.jsonl", "samples.jsonl", "eval_samples.jsonl")


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)


def rng_states() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def restore_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])


def log_lengths(run_dir: Path) -> dict[str, int]:
    return {name: (run_dir / name).stat().st_size if (run_dir / name).exists() else 0 for name in LOG_FILES}


def truncate_logs(run_dir: Path, lengths: dict[str, int]) -> None:
    """Cut every log back to its length at the checkpoint: later lines belong to lost steps."""
    for name, length in lengths.items():
        path = run_dir / name
        if path.exists():
            with path.open("r+b") as f:
                f.truncate(length)


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, state: dict[str, Any], keep_last: int) -> Path:
    root = run_dir / CHECKPOINTS
    final = root / f"step_{step:06d}"
    tmp = root / f".step_{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / "model")
    tokenizer.save_pretrained(tmp / "model")
    torch.save({**state, "step": step, "logs": log_lengths(run_dir)}, tmp / "state.pt")
    manifest = {str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "sha256": _digest(p)} for p in _files(tmp)}
    (tmp / MANIFEST).write_text(json.dumps({"step": step, "files": manifest}, indent=1))
    for path in [*_files(tmp), tmp / MANIFEST]:
        with path.open("rb") as f:
            os.fsync(f.fileno())
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)  # atomic: the checkpoint appears complete or not at all
    for old in list_checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = run_dir / CHECKPOINTS
    return sorted(p for p in root.glob("step_*") if p.is_dir()) if root.is_dir() else []


def verify_checkpoint(directory: Path) -> None:
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        raise CheckpointError(f"{manifest_path} is missing: {directory} is an incomplete checkpoint")
    try:
        files = json.loads(manifest_path.read_text())["files"]
    except (json.JSONDecodeError, KeyError) as err:
        raise CheckpointError(f"{manifest_path} is unreadable ({err})") from None
    for name, expected in files.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(f"{path} is missing from the checkpoint")
        if path.stat().st_size != expected["bytes"] or _digest(path) != expected["sha256"]:
            raise CheckpointError(f"{path} is corrupt (its size or SHA-256 differs from {manifest_path})")


def latest_checkpoint(run_dir: Path, chosen: Path | None = None) -> Path | None:
    """The checkpoint to resume from (the newest, or `chosen`), verified.

    A corrupt one is an error naming the bad file and offering the previous valid checkpoint,
    rather than a silent fall-back that would resume from a different step than the user thinks.
    """
    candidates = list_checkpoints(run_dir)
    target = chosen if chosen is not None else (candidates[-1] if candidates else None)
    if target is None:
        return None
    try:
        verify_checkpoint(target)
    except CheckpointError as err:
        earlier = [c for c in candidates if c.name < target.name]
        previous = None
        for candidate in reversed(earlier):
            try:
                verify_checkpoint(candidate)
                previous = candidate
                break
            except CheckpointError:
                continue
        offer = f" The previous valid checkpoint is {previous}: resume from it with --checkpoint {previous}." if previous else " No earlier valid checkpoint exists."
        raise CheckpointError(f"cannot resume from {target}: {err}.{offer}") from None
    return target


def load_state(directory: Path) -> dict[str, Any]:
    return torch.load(directory / "state.pt", weights_only=False)
