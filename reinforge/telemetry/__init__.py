"""Telemetry: metrics sinks (JSONL, TensorBoard), the progress display and the end-of-run summary."""

from __future__ import annotations

from reinforge.telemetry.jsonl_sink import JsonlSink, read_jsonl_metrics
from reinforge.telemetry.metrics_logger import MetricsLogger
from reinforge.telemetry.progress import ProgressDisplay
from reinforge.telemetry.summary import (
    logged_sft_seconds,
    print_summary,
    render_summary,
    reward_curve_summary,
    run_time_rows,
    time_split,
)
from reinforge.telemetry.tensorboard_sink import TensorBoardSink

__all__ = [
    "JsonlSink",
    "MetricsLogger",
    "ProgressDisplay",
    "TensorBoardSink",
    "logged_sft_seconds",
    "print_summary",
    "read_jsonl_metrics",
    "render_summary",
    "reward_curve_summary",
    "run_time_rows",
    "time_split",
]
