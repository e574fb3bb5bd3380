"""The offline Weights & Biases sink writes a local run that holds the logged scalars."""

from __future__ import annotations

import time

import wandb

from reinforge.telemetry import MetricsLogger


def _read_when_flushed(path, needle: bytes, timeout_s: float = 60.0) -> bytes:
    """The event log is written by wandb's background service process, which can still be
    flushing after `finish()` returns on a loaded machine (CI saw only the 7-byte header)."""
    deadline = time.monotonic() + timeout_s
    while True:
        data = path.read_bytes()
        if needle in data or time.monotonic() > deadline:
            return data
        time.sleep(0.2)


def test_offline_wandb_run_records_the_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with MetricsLogger(tmp_path, tensorboard=False, wandb=True, config={"algo": {"lr": 0.1}}) as logger:
        logger.log(1, {"reward": 0.25}, stage="rl")
        logger.log(2, {"reward": 0.75}, stage="rl")
        logger.log(0, {"accuracy": 0.5}, stage="eval")
    wandb.teardown()  # waits for the service to shut down, which closes the event log
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # The run's event log (what `wandb sync` uploads) holds the keys and values logged.
    log = _read_when_flushed(next(runs[0].glob("*.wandb")), b"eval/accuracy")
    for fragment in (b"rl/reward", b"0.25", b"0.75", b"eval/accuracy", b"rl/step"):
        assert fragment in log, fragment
