"""Learning-curve plots (PNG) with matplotlib's file-only backend."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display needed: CI machines and servers have none
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

# method -> one curve per seed, each a list of (step, value)
Curves = dict[str, list[list[tuple[float, float]]]]


def mean_and_spread(runs: list[list[tuple[float, float]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps common to every run, and the mean and standard deviation over runs at those steps."""
    common = sorted(set.intersection(*(set(s for s, _ in run) for run in runs)))
    values = np.array([[dict(run)[s] for s in common] for run in runs], dtype=float)
    return np.array(common), values.mean(0), values.std(0)


def plot_learning_curves(panels: dict[str, Curves], path: Path, title: str) -> Path:
    """One panel per metric (e.g. held-out accuracy, reward); one line per method: mean over
    seeds, with a band of +- one standard deviation."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    for ax, (ylabel, curves) in zip(axes[0], panels.items()):
        for method, runs in curves.items():
            steps, mean, std = mean_and_spread(runs)
            (line,) = ax.plot(steps, mean, label=method, linewidth=1.8)
            if len(runs) > 1:
                ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.18)
        ax.set_xlabel("RL step")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
