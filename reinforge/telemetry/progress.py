"""Live progress bar with the few numbers worth watching, or plain status lines when not on a TTY.

On a terminal the bar redraws in place; under CI, in a log file or a pipe, redraws turn into
thousands of garbled lines, so there we print one plain line every ~10% of the run instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

# (metric name, label, format): the only metrics shown; anything else lives in the sinks.
DISPLAY_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("reward", "reward", "{:.3f}"),
    ("accuracy", "held-out acc", "{:.3f}"),
    ("loss", "loss", "{:.4f}"),
    ("tokens_per_s", "tok/s", "{:,.0f}"),
)


def format_key_metrics(metrics: Mapping[str, Any]) -> str:
    """`reward 0.512, loss 0.1234` for the displayed fields present in `metrics`."""
    parts = []
    for name, label, fmt in DISPLAY_FIELDS:
        if name in metrics:
            parts.append(f"{label} {fmt.format(float(metrics[name]))}")
    return ", ".join(parts)  # ASCII: plain-mode lines go to logs of unknown encoding


class ProgressDisplay:
    """`with ProgressDisplay(total, "RL") as progress: progress.update(step, metrics)`.

    `step` is the number of completed steps. Shown metrics keep their latest value across
    updates, because held-out accuracy is only measured every few steps.
    """

    def __init__(self, total: int, description: str, enabled: bool = True, console: Console | None = None) -> None:
        self.total = max(0, int(total))
        self.description = description
        self.console = console if console is not None else Console()
        self.live = enabled and (self.console.is_interactive or self.console.is_jupyter)
        self._latest: dict[str, float] = {}
        self._step = 0
        self._start = time.monotonic()
        # Plain mode: print when the step reaches the next multiple of ~10% of the total.
        self._print_every = max(1, math.ceil(self.total / 10))
        self._last_printed_step: int | None = None
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ProgressDisplay:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        self._start = time.monotonic()
        if not self.live:
            return
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[metrics]}"),
            console=self.console,
        )
        self._task = self._progress.add_task(self.description, total=self.total, metrics="")
        self._progress.start()

    def update(self, step: int, metrics: Mapping[str, Any] | None = None) -> None:
        self._step = int(step)
        for name, _, _ in DISPLAY_FIELDS:
            if metrics and name in metrics:
                self._latest[name] = float(metrics[name])
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self._step, metrics=format_key_metrics(self._latest))
        elif not self.live:
            due = self._last_printed_step is None or self._step // self._print_every > self._last_printed_step // self._print_every
            finished = self._step >= self.total and self._last_printed_step != self._step
            if due or finished:
                self._print_status()

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        elif not self.live and self._last_printed_step != self._step:
            self._print_status()  # so a log always ends with where the run stopped

    def status_line(self) -> str:
        percent = 100.0 * self._step / self.total if self.total else 100.0
        fields = [f"{self.description} {self._step}/{self.total} ({percent:.0f}%)"]
        if self._latest:
            fields.append(format_key_metrics(self._latest))
        fields.append(f"elapsed {time.monotonic() - self._start:.1f} s")
        return " | ".join(fields)

    def _print_status(self) -> None:
        # Plain print, not console.print: no markup parsing, no wrapping, flushed for `tail -f`.
        print(self.status_line(), file=self.console.file, flush=True)
        self._last_printed_step = self._step
