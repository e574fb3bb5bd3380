from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from reinforge.telemetry import JsonlSink, MetricsLogger, TensorBoardSink, read_jsonl_metrics


def test_jsonl_lines_round_trip_and_convert_scalars(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    sink = JsonlSink(path)
    sink.log(1, {"reward": 0.5, "loss": np.float32(0.25)}, stage="rl")
    sink.log(2, {"reward": torch.tensor(0.75), "count": np.int64(3)}, stage="sft")
    # Flushed per line: readable before close, as after a killed run.
    records = [json.loads(line) for line in path.read_text().splitlines()]
    sink.close()

    assert [r["step"] for r in records] == [1, 2]
    assert [r["stage"] for r in records] == ["rl", "sft"]
    assert records[0]["reward"] == 0.5 and records[0]["loss"] == 0.25
    assert records[1]["reward"] == 0.75 and records[1]["count"] == 3.0
    assert all(isinstance(r["time"], float) for r in records)


def test_jsonl_appends_and_skips_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with_first = JsonlSink(path)
    with_first.log(0, {"reward": 1.0}, stage="rl")
    with_first.close()
    resumed = JsonlSink(path)
    resumed.log(1, {"reward": 2.0}, stage="rl")
    resumed.close()
    with path.open("a") as f:
        f.write('{"stage": "rl", "st')  # killed mid-write
    assert [r["reward"] for r in read_jsonl_metrics(path)] == [1.0, 2.0]


def test_reserved_metric_name_is_an_error(tmp_path):
    sink = JsonlSink(tmp_path / "metrics.jsonl")
    with pytest.raises(ValueError, match="reserved"):
        sink.log(0, {"step": 1.0}, stage="rl")
    sink.close()


def _scalars(log_dir, tag):
    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return [(event.step, event.value) for event in accumulator.Scalars(tag)]


def test_tensorboard_scalars_read_back(tmp_path):
    sink = TensorBoardSink(tmp_path / "tb")
    sink.log(0, {"reward": 0.25, "loss": torch.tensor(2.0)}, stage="rl")
    sink.log(1, {"reward": np.float64(0.5)}, stage="rl")
    sink.close()

    assert _scalars(tmp_path / "tb", "rl/reward") == [(0, 0.25), (1, 0.5)]
    assert _scalars(tmp_path / "tb", "rl/loss") == [(0, 2.0)]


def test_metrics_logger_fans_out_and_keeps_history(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=True) as logger:
        logger.log(0, {"loss": 1.5}, stage="sft")
        logger.log(0, {"reward": 0.1})
        logger.log(1, {"reward": 0.3, "accuracy": 0.5})

    assert [(r["stage"], r["step"]) for r in logger.history] == [("sft", 0), ("rl", 0), ("rl", 1)]
    assert logger.series("reward") == [0.1, 0.3]
    assert logger.series("accuracy") == [0.5]
    assert read_jsonl_metrics(tmp_path / "metrics.jsonl") == logger.history
    assert _scalars(tmp_path / "tensorboard", "sft/loss") == [(0, 1.5)]
    assert _scalars(tmp_path / "tensorboard", "rl/reward") == [(0, pytest.approx(0.1)), (1, pytest.approx(0.3))]


def test_metrics_logger_without_tensorboard(tmp_path):
    with MetricsLogger(tmp_path, tensorboard=False) as logger:
        logger.log(0, {"reward": 1.0})
    assert (tmp_path / "metrics.jsonl").exists()
    assert not (tmp_path / "tensorboard").exists()
