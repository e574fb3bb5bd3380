"""The training-health monitors in `reinforge report`: when each detector fired, and what it watched.

Reads the `health` rows of metrics.jsonl (reinforge.trainer.health): `monitor/<name>` is 1.0 at a
step where the detector fired, 0.0 where it was read and quiet; `monitor/<name>/value` the value
it compared with its threshold; `monitor/stop` marks the step where monitor.action=stop ended the run.
"""

from __future__ import annotations

from reinforge.telemetry.report_plots import _axes, figure_to_svg

STAGE = "health"
FIRED_STYLE = dict(color="#d62728", marker="X", s=46, zorder=3)


def health_rows(rows: list[dict]) -> list[dict]:
    """One health row per step (a resumed run may log a step twice: the later one counts)."""
    return list({r["step"]: r for r in rows if r.get("stage") == STAGE}.values())


def detector_names(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(k.split("/")[1] for r in health_rows(rows) for k in r if k.startswith("monitor/") and k.count("/") == 1 and k != "monitor/stop"))


def fired_steps(rows: list[dict], name: str) -> list[int]:
    return [r["step"] for r in health_rows(rows) if r.get(f"monitor/{name}") == 1.0]


def stop_step(rows: list[dict]) -> int | None:
    return next((r["step"] for r in health_rows(rows) if r.get("monitor/stop") == 1.0), None)


def spans(steps: list[int]) -> str:
    """[3, 4, 5, 9] -> '3-5, 9'."""
    out: list[list[int]] = []
    for s in steps:
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in out)


def monitor_summary(rows: list[dict]) -> str:
    """The header's line: which detectors fired, at which steps, and whether one stopped the run."""
    names = detector_names(rows)
    if not names:
        return "not run"
    fired = [f"{name} at step{'s' if len(steps) > 1 else ''} {spans(steps)}" for name in names if (steps := fired_steps(rows, name))]
    stop = stop_step(rows)
    said = "; ".join(fired) if fired else f"none fired ({len(names)} watched)"
    return said + (f"; the run stopped at step {stop} (monitor.action=stop)" if stop is not None else "")


def timeline_chart(rows: list[dict], prefix: str) -> str | None:
    """One row per detector: a grey tick at each step it was read, a red marker where it fired."""
    names = detector_names(rows)
    if not names:
        return None
    fig, ax = _axes("Training-health monitors (red: fired)", "RL step", "")
    health = health_rows(rows)
    for y, name in enumerate(names):
        read = [r["step"] for r in health if f"monitor/{name}" in r]
        ax.scatter(read, [y] * len(read), color="#9aa5b1", marker="|", s=30)
        fired = fired_steps(rows, name)
        if fired:
            ax.scatter(fired, [y] * len(fired), **FIRED_STYLE)
    stop = stop_step(rows)
    if stop is not None:
        ax.axvline(stop, color="#d62728", linestyle="--", linewidth=1, label=f"stopped (step {stop})")
        ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_ylim(-0.7, len(names) - 0.3)
    ax.grid(axis="y", alpha=0)
    return figure_to_svg(fig, prefix)


def value_chart(rows: list[dict], name: str, prefix: str) -> str | None:
    """The value `name` watched at each step it was read, its firing steps marked; None without values."""
    health = health_rows(rows)
    points = [(r["step"], r[f"monitor/{name}/value"]) for r in health if isinstance(r.get(f"monitor/{name}/value"), (int, float))]
    if not points:
        return None
    fired = set(fired_steps(rows, name))
    fig, ax = _axes(f"Monitor {name}: the value it watched", "RL step", "value")
    xs, ys = zip(*points)
    ax.plot(xs, ys, linewidth=1.6, marker="o" if len(xs) <= 30 else None, markersize=3)
    marked = [(x, y) for x, y in points if x in fired]
    if marked:
        ax.scatter(*zip(*marked), label="fired", **FIRED_STYLE)
        ax.legend(fontsize=8, frameon=False)
    return figure_to_svg(fig, prefix)


def value_charts(rows: list[dict]) -> list[str]:
    """One value chart per detector that fired at least once."""
    charts = (value_chart(rows, name, f"monitor-{name}") for name in detector_names(rows) if fired_steps(rows, name))
    return [c for c in charts if c is not None]


def monitor_charts(rows: list[dict]) -> list[str]:
    timeline = timeline_chart(rows, "monitors")
    return ([timeline] if timeline else []) + value_charts(rows)
