"""Append-only JSONL metrics file: one line per logged step.

JSONL is the record of truth for a run: it needs no library to read back, `reinforge report`
and a notebook can both parse it, and because every line is flushed as it is written, a run
killed mid-way keeps every step it logged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

RESERVED_KEYS = ("stage", "step", "time")


def to_float(value: Any) -> float:
    """A plain float from a Python, numpy or 0-d torch number (json cannot encode the latter two)."""
    if hasattr(value, "item"):  # numpy scalars, 0-d/1-element arrays and tensors
        value = value.item()
    return float(value)


def metrics_record(step: int, metrics: Mapping[str, Any], stage: str) -> dict[str, Any]:
    """The flat dict written per step; shared by the sinks and the logger's in-memory history.

    A metric named like a record field would silently overwrite it, so that is an error.
    """
    clashing = [key for key in RESERVED_KEYS if key in metrics]
    if clashing:
        raise ValueError(f"metric names {clashing} are reserved for the record fields {RESERVED_KEYS}")
    record: dict[str, Any] = {"stage": stage, "step": int(step), "time": time.time()}
    record.update({name: to_float(value) for name, value in metrics.items()})
    return record


class JsonlSink:
    """Writes `{"stage", "step", "time", **metrics}` as one JSON line per `log` call."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Append, so a resumed run continues the same file instead of erasing its history.
        self._file: TextIO | None = self.path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: Mapping[str, Any], stage: str) -> None:
        self.write(metrics_record(step, metrics, stage))

    def write(self, record: Mapping[str, Any]) -> None:
        """Write an already built record (lets the logger reuse one timestamp for all sinks)."""
        if self._file is None:
            raise RuntimeError(f"JsonlSink({self.path}) is closed")
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_jsonl_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a metrics file; a torn last line (run killed mid-write) is skipped."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
