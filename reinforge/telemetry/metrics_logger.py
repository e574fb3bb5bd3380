"""One `log` call that reaches every sink, plus an in-memory copy for the end-of-run summary.

The trainer only ever talks to `MetricsLogger`; adding a sink (W&B, ...) means adding it here,
not touching the loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from reinforge.telemetry.jsonl_sink import JsonlSink, metrics_record


class MetricsSink(Protocol):
    def log(self, step: int, metrics: Mapping[str, Any], stage: str) -> None: ...

    def close(self) -> None: ...


class MetricsLogger:
    """Fans out to `run_dir/metrics.jsonl` and, optionally, `run_dir/tensorboard/` and an offline
    Weights & Biases run in `run_dir/wandb/`."""

    def __init__(self, run_dir: str | Path, tensorboard: bool = True, wandb: bool = False, config: Mapping[str, Any] | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = JsonlSink(self.run_dir / "metrics.jsonl")
        self.sinks: list[MetricsSink] = [self.jsonl]
        if tensorboard:
            from reinforge.telemetry.tensorboard_sink import TensorBoardSink

            self.sinks.append(TensorBoardSink(self.run_dir / "tensorboard"))
        if wandb:
            from reinforge.telemetry.wandb_sink import WandbSink

            self.sinks.append(WandbSink(self.run_dir, config))
        self.history: list[dict[str, Any]] = []

    def log(self, step: int, metrics: Mapping[str, Any], stage: str = "rl") -> None:
        record = metrics_record(step, metrics, stage)  # validates names, converts to floats once
        self.history.append(record)
        values = {name: record[name] for name in metrics}
        for sink in self.sinks:
            if isinstance(sink, JsonlSink):
                sink.write(record)  # same timestamp as the history entry
            else:
                sink.log(step, values, stage)

    def series(self, name: str, stage: str = "rl") -> list[float]:
        """The values of one metric in logging order, skipping steps that did not log it."""
        return [r[name] for r in self.history if r["stage"] == stage and name in r]

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
