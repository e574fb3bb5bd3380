"""Tic-tac-toe: X and O take turns writing their mark in one of nine cells; three in a row wins.

A move is the number of an open cell, 1-9 row by row; the board is shown with open cells as their
numbers ("12O/4X6/789"), and the open cells are listed again right before the move ("open 1 2 4 6
7 8 9"): copying one of the last digits read is what a tiny model learns first, reading the board
for strategy comes later.
"""

from __future__ import annotations

import random

from reinforge.games.game import Game

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
MARKS = ("X", "O")


def winner(cells: str) -> str | None:
    for a, b, c in LINES:
        if cells[a] != "." and cells[a] == cells[b] == cells[c]:
            return cells[a]
    return None


class TicTacToe(Game):
    """State: the nine cells as a string of 'X', 'O' and '.' (X moves when the counts are equal)."""

    name = "tictactoe"
    roles = MARKS
    max_moves = 9

    def initial_state(self, rng: random.Random) -> str:
        return "." * 9

    def to_move(self, state: str) -> int:
        return 0 if state.count("X") == state.count("O") else 1

    def legal_moves(self, state: str) -> list[str]:
        if self.is_over(state):
            return []
        return [str(i + 1) for i, c in enumerate(state) if c == "."]

    def play(self, state: str, move: str) -> str:
        i = int(move) - 1
        if state[i] != ".":
            raise ValueError(f"cell {move} is taken")
        return state[:i] + MARKS[self.to_move(state)] + state[i + 1 :]

    def is_over(self, state: str) -> bool:
        return winner(state) is not None or "." not in state

    def payoffs(self, state: str) -> tuple[float, float]:
        won = winner(state)
        if won is None:
            return (0.0, 0.0)
        return (1.0, -1.0) if won == "X" else (-1.0, 1.0)

    def board(self, state: str) -> str:
        cells = [c if c != "." else str(i + 1) for i, c in enumerate(state)]
        return "/".join("".join(cells[r * 3 : r * 3 + 3]) for r in range(3))

    def rules(self, player: int) -> str:
        return f"Tic-tac-toe. You are {MARKS[player]}. Reply with an open cell number."

    def view(self, state: str, player: int) -> str:
        return f"Board {self.board(state)}. Open {' '.join(self.legal_moves(state))}. Your move:"

    def announce(self, state: str, mover: int, move: str, observer: int) -> str:
        return f"{MARKS[mover]} took {move}."
