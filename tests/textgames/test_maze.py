"""The text maze: solvable by construction (breadth-first search), walls, moves, views, limits."""

from __future__ import annotations

import random

import pytest

from reinforge.textgames.game import GameOptionsError
from reinforge.textgames.maze import WALL, Maze, MazePuzzle, carve, open_directions, shortest_path


@pytest.mark.parametrize("size", [2, 3, 5, 8])
def test_every_maze_is_solvable_and_perfect(size) -> None:
    for seed in range(25):
        grid = carve(size, random.Random(seed))
        assert len(grid) == 2 * size + 1 and all(len(row) == 2 * size + 1 for row in grid)
        assert all(c == WALL for c in grid[0] + grid[-1]) and all(row[0] == row[-1] == WALL for row in grid)  # closed border
        rooms = [(r, c) for r in range(size) for c in range(size)]
        for room in rooms:  # every room reachable from the start (BFS), so the goal is too
            assert shortest_path(grid, (0, 0), room) is not None
        openings = sum(len(open_directions(grid, room)) for room in rooms) // 2
        assert openings == len(rooms) - 1  # a spanning tree: one path between any two rooms


def test_mazes_depend_on_the_seed_only() -> None:
    assert carve(4, random.Random(3)) == carve(4, random.Random(3)) != carve(4, random.Random(4))


# Drawn by hand: rooms (0,0)-(0,1) open, (0,1)-(1,1) open, (1,1)-(1,0) open; (0,0)-(1,0) walled.
GRID = ["#####", "#...#", "###.#", "#...#", "#####"]


def puzzle(view="full", max_moves=None) -> MazePuzzle:
    game = Maze(size=2, view=view, max_moves=max_moves)
    return MazePuzzle(game, GRID, (0, 0), (1, 1))


def test_moves_walls_and_the_goal() -> None:
    p = puzzle()
    assert p.answer == "ES" and p.open_moves() == ["E"]
    assert p.view() == "#####/#@..#/###.#/#..G#/#####. Open E."
    for text in ["S", "north", "", "EE"]:
        attempt = p.attempt(text)
        assert not attempt.legal
    assert p.attempt("S").feedback == "Wall to the S." and p.position == (0, 0) and p.moves == 0
    step = p.attempt(" e ")
    assert step.legal and step.progress == 1.0 and p.position == (0, 1)
    assert step.feedback == "#####/#..@#/###.#/#..G#/#####. Open S W."
    goal = p.attempt("S")
    assert goal.legal and goal.feedback == "Goal reached." and p.over and p.solved and p.moves == 2


def test_a_step_away_from_the_goal_is_negative_progress() -> None:
    p = puzzle()
    p.attempt("E")
    assert p.attempt("W").progress == -1.0


def test_the_local_view_shows_only_the_neighbourhood() -> None:
    p = puzzle(view="local")
    assert p.view() == "At 0,0, goal 1,1. Open E."
    assert "#" not in p.attempt("E").feedback


def test_running_out_of_moves_loses() -> None:
    p = puzzle(max_moves=3)
    for move in ["E", "W", "E"]:
        assert p.attempt(move).legal
    assert p.over and not p.solved


def test_teacher_walks_a_shortest_path_without_noise() -> None:
    game = Maze(size=4)
    for seed in range(10):
        p = game.new_puzzle(random.Random(seed))
        rng = random.Random(seed)
        while not p.over:
            assert p.attempt(p.teacher_move(rng, noise=0.0)).legal
        assert p.solved and p.moves == len(p.answer)


@pytest.mark.parametrize(("options", "key"), [({"size": 1}, "size"), ({"view": "top"}, "view"), ({"max_moves": 0}, "max_moves")])
def test_bad_options(options, key) -> None:
    with pytest.raises(GameOptionsError, match=f"option {key}"):
        Maze(**options)
