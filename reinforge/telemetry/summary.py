"""The end-of-run summary: a small two-column table of what the run achieved and where time went.

The numbers are chosen to answer "did it learn?" at a glance: reward at the start vs the end,
and the best smoothed reward (single steps are too noisy to compare).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table

SUMMARY_FRACTION = 0.1
MOVING_AVERAGE_WINDOW = 10


def _summary_table(rows: Sequence[tuple[str, str]], title: str) -> Table:
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for quantity, value in rows:
        table.add_row(quantity, value)
    return table


def render_summary(rows: Sequence[tuple[str, str]], title: str, width: int = 80) -> str:
    """The table as plain text (no colour codes), for report files and tests."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    console.print(_summary_table(rows, title))
    return buffer.getvalue()


def print_summary(rows: Sequence[tuple[str, str]], title: str, console: Console | None = None) -> None:
    (console or Console()).print(_summary_table(rows, title))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def reward_curve_summary(rewards: Sequence[float]) -> dict[str, float]:
    """First-10% mean, last-10% mean, best 10-step moving average, and the number of steps.

    The 10% slices hold ceil(n / 10) steps (at least one). The moving average uses full windows
    only (a shorter run uses one window of the whole run), so an early lucky step cannot pose
    as the best smoothed reward. An empty curve gives NaN means and `steps = 0`.
    """
    n = len(rewards)
    if n == 0:
        return {"first_10pct_mean": math.nan, "last_10pct_mean": math.nan, "max_moving_avg_10": math.nan, "steps": 0}
    values = [float(r) for r in rewards]
    edge = max(1, math.ceil(n * SUMMARY_FRACTION))
    window = min(MOVING_AVERAGE_WINDOW, n)
    moving = [_mean(values[i : i + window]) for i in range(n - window + 1)]
    return {
        "first_10pct_mean": _mean(values[:edge]),
        "last_10pct_mean": _mean(values[-edge:]),
        "max_moving_avg_10": max(moving),
        "steps": n,
    }


def time_split(seconds: Mapping[str, float]) -> list[tuple[str, str]]:
    """Each phase as `("rollout", "12.3 s (45%)")`, in the given order; shares of the phases' sum."""
    total = sum(seconds.values())
    rows = []
    for phase, spent in seconds.items():
        share = 100.0 * spent / total if total > 0 else 0.0
        rows.append((phase, f"{spent:.1f} s ({share:.0f}%)"))
    return rows


def run_time_rows(sft_seconds: float, phase_seconds: Mapping[str, float]) -> list[tuple[str, str]]:
    """The time rows of a run's summary: the warm-up, then each RL phase that took time (evaluation
    included) with its share. The console and `reinforge report` both print these, from the same
    logged numbers, so the two agree."""
    return [("sft", f"{sft_seconds:.1f} s"), *time_split({phase: s for phase, s in phase_seconds.items() if s > 0})]


def logged_sft_seconds(records: Sequence[Mapping]) -> float:
    """The warm-up's seconds as its last logged record has them (`time/sft`); 0 if it logged none."""
    times = [r["time/sft"] for r in records if r.get("stage") == "sft" and "time/sft" in r]
    return times[-1] if times else 0.0
