"""Figures for `reinforge report`: matplotlib (Agg) charts rendered to SVG strings to inline in HTML.

Inline SVG keeps the report one offline file with crisp, zoomable plots. Matplotlib writes a
standalone SVG document, so it is trimmed for inlining: no XML prologue or DOCTYPE, no metadata
or namespace URLs (the HTML parser knows SVG), and every id is prefixed, since several figures
share one page and clip paths are looked up by id.
"""

from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")  # file-only backend: CI machines and servers have no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

Series = dict[str, list[tuple[float, float]]]  # curve label -> [(step, value), ...]

PHASE_COLORS = {"rollout": "#4c78a8", "reward": "#f58518", "prepare": "#54a24b", "update": "#e45756", "eval": "#b279a2"}
FIGSIZE = (5.6, 3.3)


def figure_to_svg(fig: plt.Figure, prefix: str) -> str:
    """The figure as an `<svg>` element safe to place in an HTML page next to other figures."""
    buffer = io.StringIO()
    with plt.rc_context({"svg.hashsalt": prefix}):  # deterministic ids: same run, same file
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    svg = re.sub(r'\bid="', f'id="{prefix}-', svg)
    return svg.replace('href="#', f'href="#{prefix}-').replace("url(#", f"url(#{prefix}-")


def _axes(title: str, xlabel: str, ylabel: str) -> tuple[plt.Figure, plt.Axes]:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.spines[["top", "right"]].set_visible(False)
    return fig, ax


def line_chart(title: str, series: Series, ylabel: str, prefix: str, xlabel: str = "RL step", log_y: bool = False) -> str | None:
    """One line per non-empty series (markers when a curve has few points); None if all are empty.
    `log_y`: a log y axis (for curves spanning decades), unless a value is not positive."""
    series = {label: points for label, points in series.items() if points}
    if not series:
        return None
    fig, ax = _axes(title, xlabel, ylabel)
    if log_y and all(y > 0 for points in series.values() for _, y in points):
        ax.set_yscale("log")
    for i, (label, points) in enumerate(series.items()):
        xs, ys = zip(*points)
        width = 2.0 if i == 0 else 1.4
        ax.plot(xs, ys, label=label, linewidth=width, marker="o" if len(xs) <= 30 else None, markersize=3.5)
    if len(series) > 1:
        ax.legend(fontsize=8, frameon=False)
    return figure_to_svg(fig, prefix)


def time_figure(per_step: Series) -> plt.Figure | None:
    """Seconds per step, stacked by phase; the legend gives each phase's total and share, and the
    tallest bar is labelled with its seconds. The y axis is set to hold that bar and its label:
    autoscaling would not, since a bar segment's bottom is a "sticky" edge that no margin may
    cross, so a step whose tallest stack ends at an empty segment got no headroom at all."""
    per_step = {phase: points for phase, points in per_step.items() if points}
    if not per_step:
        return None
    totals = {phase: sum(s for _, s in points) for phase, points in per_step.items()}
    grand = sum(totals.values()) or 1.0
    steps = sorted({step for points in per_step.values() for step, _ in points})
    fig, ax = _axes("Time per step, by phase", "RL step", "seconds")
    bottom = dict.fromkeys(steps, 0.0)
    for phase, points in per_step.items():
        values = dict(points)
        drawn = [step for step in steps if values.get(step, 0.0) > 0]  # no zero-height segments
        heights = [values[step] for step in drawn]
        label = f"{phase}: {totals[phase]:.1f} s ({100 * totals[phase] / grand:.0f}%)"
        ax.bar(drawn, heights, bottom=[bottom[s] for s in drawn], width=0.85, label=label,
               color=PHASE_COLORS.get(phase))
        for step, h in zip(drawn, heights):
            bottom[step] += h
    tallest = max(steps, key=lambda s: bottom[s])
    top = bottom[tallest]
    if top > 0:
        ax.annotate(f"{top:.3g} s", (tallest, top), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8)
        ax.set_ylim(0, top * 1.2)  # the label is ~6% of the axes high at this figure size
    ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
    return fig


def time_chart(per_step: Series, prefix: str) -> str | None:
    fig = time_figure(per_step)
    return None if fig is None else figure_to_svg(fig, prefix)


def reliability_chart(points: list[tuple[float, float, float]], prefix: str) -> str | None:
    """The prompt-value model's reliability curve: per bin of its prediction, (mean prediction,
    observed pass rate, samples), with the diagonal a calibrated model lies on. None without points."""
    if not points:
        return None
    fig, ax = _axes("Prompt-value model reliability (whole run)", "predicted pass rate", "observed pass rate")
    ax.xaxis.set_major_locator(MaxNLocator())
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    xs, ys, ns = zip(*points)
    ax.plot(xs, ys, marker="o", linewidth=1.4)
    for x, y, n in points:
        ax.annotate(f"{int(n)}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7, color="#555")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    return figure_to_svg(fig, prefix)
