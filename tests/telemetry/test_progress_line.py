"""The live progress line at 80 columns: the step count and the ETA always show, the least
important fields give way first, the ETA exists from the first step, an evaluation has a counter."""

from __future__ import annotations

import io
import re

from rich.console import Console

from reinforge.telemetry.progress import ProgressDisplay, clock_time, compose_line

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
METRICS = {"reward": 0.512, "accuracy": 0.48, "loss": 0.1234, "tokens_per_s": 1234.0}


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def console(width: int = 80) -> Console:
    return Console(file=io.StringIO(), width=width, record=True, force_terminal=True, force_interactive=True)


def test_at_80_columns_the_step_count_and_eta_show_and_the_line_fits() -> None:
    clock = Clock()
    shown = console(80)
    with ProgressDisplay(total=150, description="RL", console=shown, clock=clock) as progress:
        clock.now += 240  # the step-0 evaluation: not step time
        progress.update(0, METRICS)
        for step in range(1, 13):
            clock.now += 30
            progress.update(step, METRICS)
        line = progress.render_line().plain
    assert len(line) <= 79 and line.startswith("RL 12/150")
    assert clock_time(30 * 138) == "1:09:00" and "ETA 1:09:00" in line  # 30 s per step, 138 steps left
    assert "reward 0.512" in line and "tok/s" not in line  # the least important metric gave way first
    # Every redraw the terminal got (escape codes out, split where the cursor went back):
    rendered = [row for row in re.split(r"[\r\n]", ANSI.sub("", shown.file.getvalue())) if row.strip()]
    assert rendered and all(len(row) <= 80 for row in rendered)
    assert "RL 12/150" in rendered[-1] and "ETA 1:09:00" in rendered[-1]  # what the terminal was left with


def test_the_eta_comes_from_the_first_step() -> None:
    clock = Clock()
    progress = ProgressDisplay(total=100, description="RL", enabled=False, clock=clock)
    progress.start()
    clock.now += 500  # a long first evaluation
    progress.update(0)
    assert progress.eta_s() is None and "ETA -:--:--" in progress.render_line(80).plain
    clock.now += 12
    progress.update(1)
    assert progress.eta_s() == 12 * 99  # the mean step time, the evaluation before step 1 left out
    assert "ETA 0:19:48" in progress.render_line(80).plain and "ETA 0:19:48" in progress.status_line()


def test_a_resumed_run_has_an_eta_after_its_first_step() -> None:
    clock = Clock()
    progress = ProgressDisplay(total=100, description="RL", enabled=False, clock=clock)
    progress.start()
    clock.now += 20
    progress.update(41)  # resumed at step 40: no step-0 update
    assert progress.eta_s() == 20 * 59


def test_an_evaluation_shows_a_moving_counter_then_goes() -> None:
    progress = ProgressDisplay(total=150, description="RL", enabled=False, clock=Clock())
    progress.eval_started(750)
    assert "eval 0/750" in progress.render_line(80).plain
    progress.eval_advanced(37)
    line = progress.render_line(80).plain
    assert "RL 0/150" in line and "eval 37/750" in line and "ETA" in line
    progress.eval_advanced(900)  # never past its total
    assert "eval 750/750" in progress.render_line(80).plain
    progress.eval_finished()
    assert "eval" not in progress.render_line(80).plain
    progress.eval_started(None)  # an agent env's evaluation: uncounted, still labelled
    assert "eval running" in progress.render_line(80).plain


def test_an_evaluation_is_announced_in_plain_logs(capsys) -> None:
    with ProgressDisplay(total=10, description="RL", enabled=False, clock=Clock()) as progress:
        progress.eval_started(40)
        progress.eval_finished()
        progress.update(0)
    assert capsys.readouterr().out.splitlines()[0] == "RL 0/10 | eval: 40 episodes"


def test_fields_give_way_least_important_first() -> None:
    widths = {}
    for width in (200, 100, 79, 60, 50, 40, 35):
        line = compose_line(width, "RL 12/150", "0:41:07", 0.08, "eval 37/150", "0:03:12", METRICS).plain
        assert len(line) <= width and "RL 12/150" in line and "eval 37/150" in line and "ETA 0:41:07" in line
        widths[width] = line
    assert "tok/s 1,234" in widths[200] and "━" in widths[200]
    order = ["tok/s", "loss", "0:03:12", "acc", "reward"]  # DROP_ORDER: each goes before the next
    for narrower, wider in zip((100, 79, 60, 50, 40, 35), (200, 100, 79, 60, 50, 40)):
        gone = [field for field in order if field in widths[wider] and field not in widths[narrower]]
        still = [field for field in order if field in widths[narrower]]
        assert all(order.index(g) < order.index(s) for g in gone for s in still), (widths[narrower], widths[wider])
    assert not any(field in widths[35] for field in order)  # the three that never go fill 35 columns
