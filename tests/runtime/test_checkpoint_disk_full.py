"""A checkpoint that hits a full disk: a clear error, no partial directory, the previous one intact.

The disk is not really filled: the file a checkpoint writes through runs out of space after a
few bytes (torch.save then raises its own errno-less `RuntimeError: [enforce fail at
inline_container.cc:...]`, as it does on a full disk), or the model writer raises what
safetensors raises. Checked once by hand on real tmpfs mounts of 3.5 MB and 2.8 MB (state.pt,
resp. the model's shard, hit the full disk): the same message, and the run, resumed after a
remount with more room, ended bitwise equal to an uninterrupted one.
"""

from __future__ import annotations

import errno
import io
import json
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from reinforge.runtime import checkpoint as ckpt
from reinforge.runtime.run_errors import CheckpointError


class FullDiskFile(io.BytesIO):
    """A file on a disk with `room` bytes left: writes past it fail with ENOSPC."""

    def __init__(self, room: int):
        super().__init__()
        self.room = room

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def disk_full_for(monkeypatch, name: str, room: int = 100) -> None:
    """Writes of the checkpoint file `name` run out of space; every other file is written for real."""
    real = ckpt._create

    def create(path: Path):
        return FullDiskFile(room) if path.name == name else real(path)

    monkeypatch.setattr(ckpt, "_create", create)


class ModelOnFullDisk:
    """A model whose save_pretrained writes part of its shard, then fails as safetensors does."""

    def __init__(self, model):
        self.model = model

    def save_pretrained(self, directory: Path) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        (Path(directory) / "model.safetensors").write_bytes(b"\0" * 1000)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


@pytest.fixture
def run_dir(tmp_path: Path, nano_model, tokenizer) -> Path:
    """A run with a good checkpoint at step 2."""
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    ckpt.save_checkpoint(tmp_path, 2, nano_model, tokenizer, {"marker": torch.arange(5)}, keep_last=1)
    return tmp_path


def assert_step_2_intact_and_nothing_partial(run_dir: Path) -> None:
    step_2 = run_dir / "checkpoints" / "step_000002"
    assert ckpt.list_checkpoints(run_dir) == [step_2]
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000002"]  # no .tmp left
    ckpt.verify_checkpoint(step_2)
    assert torch.equal(ckpt.load_state(step_2)["marker"], torch.arange(5))


@pytest.mark.parametrize("failing_file", ["state.pt", "manifest.json"])
def test_no_space_while_writing_names_the_checkpoint_and_the_intact_previous(
    run_dir: Path, nano_model, tokenizer, monkeypatch, failing_file: str
) -> None:
    disk_full_for(monkeypatch, failing_file)
    # keep_last=1: had the new one been taken as written, step 2 would be pruned.
    with pytest.raises(CheckpointError) as caught:
        ckpt.save_checkpoint(run_dir, 4, nano_model, tokenizer, {"marker": torch.zeros(1000)}, keep_last=1)
    message = str(caught.value)
    assert message.startswith(f"no space left on device while writing checkpoint {run_dir / 'checkpoints' / 'step_000004'}")
    assert f"previous checkpoint {run_dir / 'checkpoints' / 'step_000002'} is intact" in message
    assert f"--resume {run_dir}" in message
    assert_step_2_intact_and_nothing_partial(run_dir)


def test_torch_own_message_does_not_say_no_space() -> None:
    """The message users saw; the checkpoint writer keeps the OSError behind it and names it."""
    with pytest.raises(RuntimeError, match="enforce fail at inline_container") as caught:
        torch.save({"x": torch.zeros(1000)}, FullDiskFile(100))
    assert "space" not in str(caught.value)


def test_no_space_while_writing_the_model(run_dir: Path, nano_model, tokenizer) -> None:
    with pytest.raises(CheckpointError, match="no space left on device while writing checkpoint .*step_000004"):
        ckpt.save_checkpoint(run_dir, 4, ModelOnFullDisk(nano_model), tokenizer, {}, keep_last=1)
    assert_step_2_intact_and_nothing_partial(run_dir)


def test_no_space_at_the_first_checkpoint_says_there_is_none_before(tmp_path: Path, nano_model, tokenizer, monkeypatch) -> None:
    disk_full_for(monkeypatch, "state.pt")
    with pytest.raises(CheckpointError, match="there is no earlier checkpoint: a resume starts the run over"):
        ckpt.save_checkpoint(tmp_path, 2, nano_model, tokenizer, {"x": torch.zeros(1000)}, keep_last=1)
    assert list((tmp_path / "checkpoints").iterdir()) == []


def test_a_damaged_previous_checkpoint_is_not_called_intact(run_dir: Path, nano_model, tokenizer, monkeypatch) -> None:
    state = run_dir / "checkpoints" / "step_000002" / "state.pt"
    state.write_bytes(state.read_bytes()[:-4] + b"bad!")
    disk_full_for(monkeypatch, "state.pt")
    with pytest.raises(CheckpointError) as caught:
        ckpt.save_checkpoint(run_dir, 4, nano_model, tokenizer, {"x": torch.zeros(1000)}, keep_last=1)
    assert "is damaged too" in str(caught.value) and "corrupt" in str(caught.value) and "is intact" not in str(caught.value)


def test_other_write_errors_propagate_unchanged_and_leave_nothing_partial(run_dir: Path, nano_model, tokenizer, monkeypatch) -> None:
    def create(path: Path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(ckpt, "_create", create)
    with pytest.raises(PermissionError):
        ckpt.save_checkpoint(run_dir, 4, nano_model, tokenizer, {}, keep_last=1)
    assert_step_2_intact_and_nothing_partial(run_dir)


def test_a_written_checkpoint_is_complete_and_verified(run_dir: Path) -> None:
    manifest = json.loads((run_dir / "checkpoints" / "step_000002" / "manifest.json").read_text())
    assert manifest["step"] == 2 and {"state.pt", "model/model.safetensors"} <= set(manifest["files"])
    state = ckpt.load_state(run_dir / "checkpoints" / "step_000002")
    assert state["step"] == 2 and state["logs"]["metrics.jsonl"] == len('{"step": 1}\n{"step": 2}\n')


@pytest.mark.parametrize(
    "error, full",
    [
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), True),
        (SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"), True),
        (OSError(errno.EACCES, "Permission denied"), False),
        (RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"), False),
    ],
)
def test_is_no_space_error(error: BaseException, full: bool) -> None:
    assert ckpt.is_no_space_error(error) is full
    try:
        raise RuntimeError("wrapped") from error
    except RuntimeError as wrapped:
        assert ckpt.is_no_space_error(wrapped) is full  # found through the chain
