"""The offline Weights & Biases sink writes a local run that holds the logged scalars."""

from __future__ import annotations

from reinforge.telemetry import MetricsLogger


def test_offline_wandb_run_records_the_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with MetricsLogger(tmp_path, tensorboard=False, wandb=True, config={"algo": {"lr": 0.1}}) as logger:
        logger.log(1, {"reward": 0.25}, stage="rl")
        logger.log(2, {"reward": 0.75}, stage="rl")
        logger.log(0, {"accuracy": 0.5}, stage="eval")
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # The run's event log (what `wandb sync` uploads) holds the keys and values logged.
    log = next(runs[0].glob("*.wandb")).read_bytes()
    for fragment in (b"rl/reward", b"0.25", b"0.75", b"eval/accuracy", b"rl/step"):
        assert fragment in log, fragment
