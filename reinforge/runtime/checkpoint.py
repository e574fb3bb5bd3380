"""Checkpoints of a whole RL run, written atomically, verified on load, the last K kept.

A checkpoint is a directory `checkpoints/step_NNNNNN/` holding the policy in Hugging Face format
(`model/`), and `state.pt` with everything else the loop carries: optimizer, learner version,
reference and critic, the task sampler's cursor and RNG, the mini-batch shuffle generator, the
global RNG states, the results so far and the byte length of every log file at that step (so a
resumed run rewrites exactly what an uninterrupted one would). It is written under a temporary
name and renamed into place last, with a manifest of file sizes and SHA-256 digests, so a crash
while writing never leaves a directory that looks like a valid checkpoint.

Parts that other processes hold (a sharded learner's shards, written by every rank:
reinforge.distributed.sharded_checkpoint) are written into the same temporary directory by
`write_parts`, before the manifest, so they are renamed, verified and pruned with the rest; state.pt
refers to such a part by a dict `{PART: path relative to the checkpoint, ...}`, made absolute on load.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from reinforge.runtime.run_errors import CheckpointError

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
LOG_FILES = ("metrics.jsonl", "samples.jsonl", "eval_samples.jsonl")
PART = "checkpoint_part"  # the key of a state.pt entry that names a part of the checkpoint directory


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


def _end_of_last_line(f, size: int, block: int = 1 << 16) -> int:
    """The offset just past the last newline in the first `size` bytes of `f` (0 if none)."""
    end = size
    while end > 0:
        start = max(0, end - block)
        f.seek(start)
        newline = f.read(end - start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def truncate_logs(run_dir: Path, lengths: dict[str, int]) -> list[str]:
    """Cut every log back to its length at the checkpoint: later lines belong to lost steps.

    A log already shorter than that (edited by hand, partly lost in a copy) is never extended
    (`truncate` would pad it with NUL bytes, which no JSONL reader accepts): it keeps what it has,
    cut back to its last complete line so that the resumed run's rows start on a line of their own.
    Returns one warning per such log, for the caller to show.
    """
    warnings = []
    for name, length in lengths.items():
        path = run_dir / name
        size = path.stat().st_size if path.exists() else 0
        if size >= length:
            if path.exists():
                with path.open("r+b") as f:
                    f.truncate(length)
            continue
        kept = 0
        if path.exists():
            with path.open("r+b") as f:
                kept = _end_of_last_line(f, size)
                f.truncate(kept)
        state = f"is {size} bytes" if path.exists() else "is missing"
        warnings.append(
            f"{path} {state}, shorter than the {length} bytes it had at the checkpoint: rows of earlier steps are "
            f"missing from it; kept its {kept} bytes of complete lines and appending the resumed run's rows after them"
        )
    return warnings


class _WriteErrorRecorder:
    """The file `torch.save` writes state.pt through. torch turns a failed write into an errno-less
    `RuntimeError: [enforce fail at inline_container.cc:...]`; this keeps the OSError it swallowed,
    so that a full disk can be told from a bug."""

    def __init__(self, file):
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.file.flush()


def _create(path: Path):
    """Every file of a checkpoint that is not written by transformers is opened here (a test seam)."""
    return path.open("wb")


def _save_state(state: dict[str, Any], path: Path) -> None:
    with _create(path) as f:
        recorder = _WriteErrorRecorder(f)
        try:
            torch.save(state, recorder)
        except RuntimeError as err:
            if recorder.error is not None:
                raise recorder.error from err  # the cause torch's message lost (e.g. ENOSPC)
            raise


def _write_checkpoint(tmp: Path, step: int, model, tokenizer, state: dict[str, Any], write_parts: Callable[[Path], None] | None) -> None:
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / "model")
    tokenizer.save_pretrained(tmp / "model")
    _save_state(state, tmp / "state.pt")
    if write_parts is not None:
        write_parts(tmp)
    manifest = {str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "sha256": _digest(p)} for p in _files(tmp)}
    with _create(tmp / MANIFEST) as f:
        f.write(json.dumps({"step": step, "files": manifest}, indent=1).encode())
    for path in [*_files(tmp), tmp / MANIFEST]:
        with path.open("rb") as f:
            os.fsync(f.fileno())


NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def is_no_space_error(err: BaseException | None) -> bool:
    """A full disk (or quota) anywhere in the exception's chain. safetensors reports it only in
    its message ("No space left on device (os error 28)"), without an errno attribute."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS:
            return True
        if any(os.strerror(code) in str(err) for code in NO_SPACE_ERRNOS):
            return True
        err = err.__cause__ or err.__context__
    return False


def _previous_checkpoint_status(run_dir: Path, failed: Path) -> str:
    earlier = [c for c in list_checkpoints(run_dir) if c.name < failed.name]
    if not earlier:
        return "there is no earlier checkpoint: a resume starts the run over"
    previous = earlier[-1]
    try:
        verify_checkpoint(previous)
    except CheckpointError as err:
        return f"the previous checkpoint {previous} is damaged too ({err})"
    return f"previous checkpoint {previous} is intact (sizes and SHA-256 digests verified)"


def save_checkpoint(
    run_dir: Path, step: int, model, tokenizer, state: dict[str, Any], keep_last: int, write_parts: Callable[[Path], None] | None = None,
) -> Path:
    """Write `checkpoints/step_NNNNNN` atomically, then drop all but the newest `keep_last`.
    `write_parts(directory)` adds what other processes hold (a sharded learner's shards).

    A write that fails leaves no trace: the partial directory is removed and the earlier
    checkpoints are untouched (they are pruned only once the new one is in place). A full disk is
    a CheckpointError that says so and names the previous checkpoint, verified.
    """
    root = run_dir / CHECKPOINTS
    final = root / f"step_{step:06d}"
    tmp = root / f".step_{step:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _write_checkpoint(tmp, step, model, tokenizer, {**state, "step": step, "logs": log_lengths(run_dir)}, write_parts)
    except Exception as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if not is_no_space_error(err):
            raise
        raise CheckpointError(
            f"no space left on device while writing checkpoint {final} (RL step {step}; the partial copy was removed); "
            f"{_previous_checkpoint_status(run_dir, final)}. Free some space, then continue with "
            f"`reinforge train --resume {run_dir}`"
        ) from err
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


def resume_from(run_dir: Path, found: Path) -> dict[str, Any]:
    """The state of checkpoint `found` of `run_dir`, its logs cut back to that checkpoint (a warning
    on stderr for each log that ended early), announced on stdout."""
    state = load_state(found)
    for warning in truncate_logs(run_dir, state["logs"]):
        print(f"reinforge: warning: {warning}", file=sys.stderr)
    print(f"resuming {run_dir} after step {state['step']} from {found}")
    return state


def _resolve_parts(tree: Any, directory: Path) -> Any:
    """Every `{PART: relative path}` entry of a loaded state.pt made to name its path under `directory`
    (in place: the other dicts keep their type, e.g. a module state_dict's OrderedDict and metadata)."""
    if not isinstance(tree, dict):
        return tree
    if PART in tree:
        return {**tree, PART: directory / tree[PART]}
    for key, value in tree.items():
        resolved = _resolve_parts(value, directory)
        if resolved is not value:
            tree[key] = resolved  # an existing key: the dict does not change size while iterated
    return tree


def load_state(directory: Path) -> dict[str, Any]:
    return _resolve_parts(torch.load(directory / "state.pt", weights_only=False), directory)
