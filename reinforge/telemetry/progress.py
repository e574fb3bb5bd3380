"""Live progress line with the few numbers worth watching, or plain status lines when not on a TTY.

On a terminal the line redraws in place; under CI, in a log file or a pipe, redraws turn into
thousands of garbled lines, so there we print one plain line every ~10% of the run instead.

The live line is laid out here, not by a table of columns: a table cut at the terminal's width
lost the step count and the times first (80 columns). Its fields, most important first: the step
count, the evaluation's counter while one runs, the ETA; then the metrics and the elapsed time,
the least important dropped first, and a bar in what room is left (`compose_line`).

The ETA is the mean time per step so far times the steps left, from the first finished step on
(rich's own estimate waits for two updates within 30 s, which steps of a minute never give). The
evaluation before step 1 does not count as step time; later evaluations do, since they recur.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import Progress, ProgressColumn, Task, TaskID
from rich.text import Text

# (metric name, label, format): the only metrics shown; anything else lives in the sinks.
DISPLAY_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("reward", "reward", "{:.3f}"),
    ("accuracy", "held-out acc", "{:.3f}"),
    ("loss", "loss", "{:.4f}"),
    ("tokens_per_s", "tok/s", "{:,.0f}"),
)
# The live line's shorter labels, and the order its metrics give way when the line is too long.
LIVE_LABELS = {"reward": "reward", "accuracy": "acc", "loss": "loss", "tokens_per_s": "tok/s"}
DROP_ORDER = ("tokens_per_s", "loss", "elapsed", "accuracy", "reward")
MIN_BAR, MAX_BAR = 8, 30


def format_key_metrics(metrics: Mapping[str, Any]) -> str:
    """`reward 0.512, loss 0.1234` for the displayed fields present in `metrics`."""
    parts = []
    for name, label, fmt in DISPLAY_FIELDS:
        if name in metrics:
            parts.append(f"{label} {fmt.format(float(metrics[name]))}")
    return ", ".join(parts)  # ASCII: plain-mode lines go to logs of unknown encoding


def clock_time(seconds: float | None) -> str:
    """`1:02:03`; `-:--:--` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-:--:--"
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def compose_line(
    width: int,
    head: str,
    eta: str,
    fraction: float,
    evaluation: str | None = None,
    elapsed: str | None = None,
    metrics: Mapping[str, float] | None = None,
) -> Text:
    """One line of at most `width` cells: `head` (the step count), `evaluation`, `eta` always;
    metrics and `elapsed` as room allows (DROP_ORDER goes first), then a bar of `fraction` if
    at least MIN_BAR cells are left."""
    kept = {name: f"{LIVE_LABELS[name]} {fmt.format(float(metrics[name]))}"
            for name, _, fmt in DISPLAY_FIELDS if metrics and name in metrics}
    if elapsed is not None:
        kept["elapsed"] = elapsed

    def text_fields() -> list[str]:
        order = ["elapsed", *[name for name, _, _ in DISPLAY_FIELDS]]
        fixed = [head, *([evaluation] if evaluation else []), f"ETA {eta}"]
        return fixed + [kept[name] for name in order if name in kept]

    for name in DROP_ORDER:
        if len("  ".join(text_fields())) <= width:
            break
        kept.pop(name, None)
    fields = text_fields()
    line = Text(fields[0], style="bold")
    room = width - len("  ".join(fields)) - 2
    if room >= MIN_BAR:
        bar = min(room, MAX_BAR)
        filled = int(round(max(0.0, min(1.0, fraction)) * bar))
        line.append("  ")
        line.append("━" * filled, style="magenta")
        line.append("━" * (bar - filled), style="grey23")
    for field in fields[1:]:
        line.append("  ")
        line.append(field, style="cyan" if field.startswith(("eval", "ETA")) else "")
    line.truncate(width)  # a head longer than the terminal: cut, never wrapped
    return line


class _LineColumn(ProgressColumn):
    """Rich calls this at every refresh: the elapsed time and ETA move between steps."""

    def __init__(self, display: "ProgressDisplay"):
        super().__init__()
        self.display = display

    def render(self, task: Task) -> Text:
        return self.display.render_line()


class ProgressDisplay:
    """`with ProgressDisplay(total, "RL") as progress: progress.update(step, metrics)`.

    `step` is the number of completed steps. Shown metrics keep their latest value across
    updates, because held-out accuracy is only measured every few steps. Around an evaluation,
    `eval_started(total)`, `eval_advanced(done)` and `eval_finished()` label it with a counter.
    """

    def __init__(self, total: int, description: str, enabled: bool = True, console: Console | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = max(0, int(total))
        self.description = description
        self.console = console if console is not None else Console()
        self.live = enabled and (self.console.is_interactive or self.console.is_jupyter)
        self.clock = clock
        self._latest: dict[str, float] = {}
        self._step = 0
        self._start = clock()
        self._base: tuple[int, float] | None = None  # (step, time) the ETA's mean step time counts from
        self._last_update = self._start
        self._eval: tuple[int, int | None] | None = None  # (done, total) while an evaluation runs
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
        self._start = self._last_update = self.clock()
        if not self.live:
            return
        self._progress = Progress(_LineColumn(self), console=self.console)
        self._task = self._progress.add_task(self.description, total=self.total)
        self._progress.start()

    def update(self, step: int, metrics: Mapping[str, Any] | None = None) -> None:
        now = self.clock()
        self._step = int(step)
        self._last_update = now
        if self._base is None:
            # Step 0 (after the first evaluation): steps start now. A first update at step s > 0
            # (a resumed run) finished step s, which started when the display did.
            self._base = (0, now) if self._step == 0 else (self._step - 1, self._start)
        for name, _, _ in DISPLAY_FIELDS:
            if metrics and name in metrics:
                self._latest[name] = float(metrics[name])
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=self._step)
        elif not self.live:
            due = self._last_printed_step is None or self._step // self._print_every > self._last_printed_step // self._print_every
            finished = self._step >= self.total and self._last_printed_step != self._step
            if due or finished:
                self._print_status()

    # --- evaluation -----------------------------------------------------------------------------
    def eval_started(self, total: int | None) -> None:
        """An evaluation of `total` episodes begins (None: uncounted, shown as running)."""
        self._eval = (0, total)
        if not self.live:
            count = f"{total} episodes" if total else "running"
            print(f"{self.description} {self._step}/{self.total} | eval: {count}", file=self.console.file, flush=True)
        self._refresh()

    def eval_advanced(self, done: int) -> None:
        if self._eval is not None:
            total = self._eval[1]
            self._eval = (done if total is None else min(done, total), total)  # drawn at the next auto-refresh

    def eval_finished(self) -> None:
        self._eval = None
        self._refresh()

    def _refresh(self) -> None:
        if self._progress is not None:
            self._progress.refresh()

    # --- what is shown --------------------------------------------------------------------------
    def eta_s(self) -> float | None:
        """Seconds left at the mean step time so far; None before the first step has finished."""
        if self._base is None or self._step <= self._base[0]:
            return None
        per_step = (self._last_update - self._base[1]) / (self._step - self._base[0])
        return per_step * max(0, self.total - self._step)

    def render_line(self, width: int | None = None) -> Text:
        width = (width if width is not None else self.console.width) - 1  # the last cell would wrap some terminals
        evaluation = fraction = None
        if self._eval is not None:
            done, total = self._eval
            evaluation = f"eval {done}/{total}" if total else "eval running"
            fraction = done / total if total else None
        if fraction is None:
            fraction = self._step / self.total if self.total else 1.0
        return compose_line(
            width, f"{self.description} {self._step}/{self.total}", clock_time(self.eta_s()), fraction,
            evaluation, clock_time(self.clock() - self._start), self._latest,
        )

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
        fields.append(f"elapsed {self.clock() - self._start:.1f} s")
        eta = self.eta_s()
        if eta is not None and self._step < self.total:
            fields.append(f"ETA {clock_time(eta)}")
        return " | ".join(fields)

    def _print_status(self) -> None:
        # Plain print, not console.print: no markup parsing, no wrapping, flushed for `tail -f`.
        print(self.status_line(), file=self.console.file, flush=True)
        self._last_printed_step = self._step
