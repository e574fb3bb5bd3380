"""Connect Four: two players drop discs into a 7-column, 6-row grid; four in a line wins.

A move is a column number 1-7 that is not full. The board is shown top row first, '.' for empty.
"""

from __future__ import annotations

import random

from reinforge.games.game import Game

COLUMNS, ROWS = 7, 6
MARKS = ("X", "O")
DIRECTIONS = ((0, 1), (1, 0), (1, 1), (1, -1))


def connected_four(cells: tuple[str, ...]) -> str | None:
    """The mark with four in a line, if any. `cells[row * COLUMNS + col]`, row 0 at the bottom."""
    for row in range(ROWS):
        for col in range(COLUMNS):
            mark = cells[row * COLUMNS + col]
            if mark == ".":
                continue
            for dr, dc in DIRECTIONS:
                end_r, end_c = row + 3 * dr, col + 3 * dc
                if not (0 <= end_r < ROWS and 0 <= end_c < COLUMNS):
                    continue
                if all(cells[(row + k * dr) * COLUMNS + col + k * dc] == mark for k in range(1, 4)):
                    return mark
    return None


class ConnectFour(Game):
    """State: the 42 cells, bottom row first, as a tuple of 'X', 'O' and '.'."""

    name = "connect_four"
    roles = MARKS
    max_moves = COLUMNS * ROWS

    def initial_state(self, rng: random.Random) -> tuple[str, ...]:
        return (".",) * (COLUMNS * ROWS)

    def to_move(self, state: tuple[str, ...]) -> int:
        return 0 if state.count("X") == state.count("O") else 1

    def legal_moves(self, state: tuple[str, ...]) -> list[str]:
        if self.is_over(state):
            return []
        return [str(col + 1) for col in range(COLUMNS) if state[(ROWS - 1) * COLUMNS + col] == "."]

    def play(self, state: tuple[str, ...], move: str) -> tuple[str, ...]:
        col = int(move) - 1
        for row in range(ROWS):
            if state[row * COLUMNS + col] == ".":
                cells = list(state)
                cells[row * COLUMNS + col] = MARKS[self.to_move(state)]
                return tuple(cells)
        raise ValueError(f"column {move} is full")

    def is_over(self, state: tuple[str, ...]) -> bool:
        return connected_four(state) is not None or "." not in state

    def payoffs(self, state: tuple[str, ...]) -> tuple[float, float]:
        won = connected_four(state)
        if won is None:
            return (0.0, 0.0)
        return (1.0, -1.0) if won == "X" else (-1.0, 1.0)

    def board(self, state: tuple[str, ...]) -> str:
        rows = ["".join(state[row * COLUMNS : (row + 1) * COLUMNS]) for row in range(ROWS - 1, -1, -1)]
        return "/".join(rows)

    def rules(self, player: int) -> str:
        return f"Connect Four. You are {MARKS[player]}. Reply with a column number 1-7."

    def view(self, state: tuple[str, ...], player: int) -> str:
        return f"Board {self.board(state)}. Your move:"

    def announce(self, state: tuple[str, ...], mover: int, move: str, observer: int) -> str:
        return f"{MARKS[mover]} dropped in {move}."
