"""`reinforge eval` on a game run's model: win / draw / loss against each fixed opponent, and the rating.

The evaluation itself is the training loop's (reinforge.games.evaluation, greedy games against
every evaluation opponent in every seat); this file turns its metrics into the table that
`reinforge eval` prints and writes into eval.md (accuracy there is the not-lost rate).
"""

from __future__ import annotations

import re

from rich.console import Console
from rich.table import Table

COLUMNS = ("win", "draw", "loss", "unfinished", "win_draw")


def opponents(metrics: dict[str, float]) -> list[str]:
    return sorted({m.group(1) for key in metrics if (m := re.fullmatch(r"game/vs-([^/]+)/win", key))})


def game_rows(metrics: dict[str, float]) -> tuple[list[str], list[list[str]]]:
    """One row per fixed opponent: the greedy games' outcome rates (not lost = win + draw)."""
    header = ["opponent", *(c.replace("win_draw", "not lost") for c in COLUMNS)]
    rows = [[name, *(f"{metrics[f'game/vs-{name}/{c}']:.1%}" for c in COLUMNS)] for name in opponents(metrics)]
    return header, rows


def rating_line(metrics: dict[str, float]) -> str | None:
    if "rating/mu" not in metrics:
        return None
    anchors = ", ".join(
        f"{key.split('/')[2]} {value:.1f}" for key, value in sorted(metrics.items()) if key.startswith("rating/anchor/")
    )
    return (
        f"rating (OpenSkill): mu {metrics['rating/mu']:.1f}, sigma {metrics['rating/sigma']:.1f} "
        f"(mu - 3 sigma {metrics['rating/ordinal']:.1f}); anchors: {anchors}"
    )


def games_markdown(metrics: dict[str, float]) -> str:
    header, rows = game_rows(metrics)
    lines = [
        "## Games (greedy, every opponent in every seat)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
        "",
        f"- illegal-move rate {metrics['illegal_move_rate']:.1%}, {metrics['game_length']:.2f} moves per game",
    ]
    if (line := rating_line(metrics)) is not None:
        lines.append(f"- {line}")
    return "\n".join(lines) + "\n"


def print_games(metrics: dict[str, float], console: Console | None = None) -> None:
    header, rows = game_rows(metrics)
    table = Table(title="games (greedy)", header_style="bold")
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console = console or Console(highlight=False)
    console.print(table)
    if (line := rating_line(metrics)) is not None:
        console.print(line)
