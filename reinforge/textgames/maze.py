"""A text maze: walk from the start to the goal through a grid of walls, one step N / S / E / W.

The maze is carved by a randomized depth-first search (a "recursive backtracker") over a
`size` x `size` grid of rooms, seeded by the puzzle's rng: every room is reachable from every
other, so each maze is solvable by construction (a test checks it by breadth-first search). It
is drawn `2 * size + 1` characters wide, room (r, c) at character (2r + 1, 2c + 1) and the
characters between rooms walls or openings: `#` wall, `.` floor, `@` the player, `G` the goal.
The start is the top-left room, the goal the bottom-right one.

Views: `full` shows the whole drawing row by row (rows joined by "/"); `local` shows only the
player's room, the goal's, and which of the four directions are open (partial observability).
Both list the open directions before the move.

A move is one letter N, S, E or W (any case; surrounding spaces ignored) and goes one room that
way; anything else, or a step into a wall, is an illegal move. The game is won on reaching the
goal, lost after `max_moves` legal steps (default: twice the number of rooms; a shortest walk
takes at most rooms - 1).
"""

from __future__ import annotations

import random
from collections import deque

from reinforge.textgames.game import Attempt, GameOptionsError, Puzzle, TextGame

STEPS = {"N": (-1, 0), "S": (1, 0), "E": (0, 1), "W": (0, -1)}
WALL, FLOOR, PLAYER, GOAL = "#", ".", "@", "G"


def carve(size: int, rng: random.Random) -> list[str]:
    """A perfect maze (one path between any two rooms) as rows of `#` and `.`; room (r, c) is at
    grid cell (2r + 1, 2c + 1)."""
    n = 2 * size + 1
    grid = [[WALL] * n for _ in range(n)]
    grid[1][1] = FLOOR
    stack, seen = [(0, 0)], {(0, 0)}
    while stack:
        r, c = stack[-1]
        fresh = [(r + dr, c + dc) for dr, dc in STEPS.values() if 0 <= r + dr < size and 0 <= c + dc < size and (r + dr, c + dc) not in seen]
        if not fresh:
            stack.pop()
            continue
        nr, nc = rng.choice(fresh)
        grid[2 * nr + 1][2 * nc + 1] = FLOOR
        grid[r + nr + 1][c + nc + 1] = FLOOR  # the wall between the two rooms
        seen.add((nr, nc))
        stack.append((nr, nc))
    return ["".join(row) for row in grid]


def open_directions(grid: list[str], room: tuple[int, int]) -> list[str]:
    r, c = 2 * room[0] + 1, 2 * room[1] + 1
    return [m for m, (dr, dc) in STEPS.items() if grid[r + dr][c + dc] != WALL]


def shortest_path(grid: list[str], start: tuple[int, int], goal: tuple[int, int]) -> list[str] | None:
    """The moves of a shortest walk between two rooms by breadth-first search, None if there is none."""
    previous: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            moves = []
            while previous[cell] is not None:
                cell, move = previous[cell]
                moves.append(move)
            return moves[::-1]
        for move in open_directions(grid, cell):
            dr, dc = STEPS[move]
            nxt = (cell[0] + dr, cell[1] + dc)
            if nxt not in previous:
                previous[nxt] = (cell, move)
                queue.append(nxt)
    return None


class Maze(TextGame):
    name = "maze"
    option_defaults = {"size": 3, "view": "full", "max_moves": None}

    def __init__(self, **options):
        super().__init__(**options)
        self.size = self.int_option("size", 2, 12)
        if self.options["view"] not in ("full", "local"):
            raise GameOptionsError(f"option view of maze must be full or local, got {self.options['view']!r}")
        self.view = self.options["view"]
        self.moves_allowed = 2 * self.size**2 if self.options["max_moves"] is None else self.int_option("max_moves", 1)

    @property
    def max_moves(self) -> int:
        return self.moves_allowed

    def new_puzzle(self, rng: random.Random) -> "MazePuzzle":
        end = self.size - 1
        return MazePuzzle(self, carve(self.size, rng), (0, 0), (end, end))


class MazePuzzle(Puzzle):
    def __init__(self, game: Maze, grid: list[str], start: tuple[int, int], goal: tuple[int, int]):
        self.game, self.grid, self.position, self.goal = game, grid, start, goal
        self.shortest = shortest_path(grid, start, goal) or []
        self.moves = 0

    @property
    def answer(self) -> str:
        return "".join(self.shortest)  # a shortest walk from the start

    @property
    def over(self) -> bool:
        return self.solved or self.moves >= self.game.max_moves

    @property
    def solved(self) -> bool:
        return self.position == self.goal

    def open_moves(self) -> list[str]:
        return open_directions(self.grid, self.position)

    def distance(self) -> int:
        return len(shortest_path(self.grid, self.position, self.goal) or [])

    def view(self) -> str:
        opened = " ".join(self.open_moves())
        if self.game.view == "local":
            return f"At {self.position[0]},{self.position[1]}, goal {self.goal[0]},{self.goal[1]}. Open {opened}."
        rows = [list(row) for row in self.grid]
        rows[2 * self.goal[0] + 1][2 * self.goal[1] + 1] = GOAL
        rows[2 * self.position[0] + 1][2 * self.position[1] + 1] = PLAYER
        return f"{'/'.join(''.join(row) for row in rows)}. Open {opened}."

    def intro(self) -> str:
        what = "the maze" if self.game.view == "full" else "your room's row,column and the goal's"
        return f"Maze. Walk from @ to G; # is wall. Reply N, S, E or W. You see {what}.\n{self.view()}"

    def attempt(self, text: str) -> Attempt:
        move = text.strip().upper()
        if move not in STEPS:
            return Attempt(False, f"{text.strip()[:12]!r} is not N, S, E or W.")
        if move not in self.open_moves():
            return Attempt(False, f"Wall to the {move}.")
        before = self.distance()
        dr, dc = STEPS[move]
        self.position = (self.position[0] + dr, self.position[1] + dc)
        self.moves += 1
        after = self.distance()
        if self.solved:
            return Attempt(True, "Goal reached.", progress=1.0)
        tail = " No moves left." if self.over else ""
        return Attempt(True, self.view() + tail, progress=float(before - after))

    def teacher_move(self, rng: random.Random, noise: float) -> str:
        """A step of a shortest walk to the goal, or (with probability `noise`) any open direction."""
        if rng.random() < noise:
            return rng.choice(self.open_moves())
        return (shortest_path(self.grid, self.position, self.goal) or self.open_moves())[0]
