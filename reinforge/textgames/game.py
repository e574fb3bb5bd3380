"""The TextGame protocol: a one-player text game's rules, in text, without tokens.

A `TextGame` is built once per run from its options (`task.params.options`, checked before any
compute) and deals puzzles: `new_puzzle(rng)` is one game in progress, a `Puzzle`. The puzzle is
a function of the rng alone, so a task that stores its seed stands for one puzzle, and every
episode of a group replays it (a group-relative baseline compares attempts at the same puzzle).

A puzzle talks in text: `intro()` is the first message (the rules, the move format, the first
view), `attempt(text)` judges one policy turn. A turn that is not a legal move (unparseable, an
unknown word, a move into a wall) is `Attempt(legal=False, feedback=why)`: the referee
(textgames.episode) counts it and tells the player; a legal one is played and answered.

`progress` is the game's optional shaping signal for one legal move (a per-turn reward when the
config asks for it): new green letters in Wordle, candidates ruled out in twenty questions, steps
closer to the goal in the maze. `teacher_move` is a move of the game's demonstration player, whose
games the warm-up imitates (the move format and sensible play, on purpose not perfect play).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar


class GameOptionsError(ValueError):
    """A bad option of a text game; the message names the option."""


@dataclass(frozen=True)
class Attempt:
    legal: bool
    feedback: str  # what the player is told: the game's answer, or why the move was illegal
    progress: float = 0.0  # the shaping signal of a legal move (see the module docstring)


class Puzzle(ABC):
    moves: int = 0  # legal moves played

    @property
    @abstractmethod
    def answer(self) -> str:
        """The solution, for records and reports (never shown to the player)."""

    @abstractmethod
    def intro(self) -> str:
        """The first message: the rules, the move format, the first view."""

    @abstractmethod
    def attempt(self, text: str) -> Attempt:
        """Judge and (if legal) play one turn of the player; only called while not over."""

    @property
    @abstractmethod
    def over(self) -> bool:
        ...

    @property
    @abstractmethod
    def solved(self) -> bool:
        ...

    @abstractmethod
    def teacher_move(self, rng: random.Random, noise: float) -> str:
        """A legal move of the demonstration player; with probability `noise` a worse one (a
        random legal move), so the warm-up leaves RL room to improve."""


class TextGame(ABC):
    name: ClassVar[str]
    option_defaults: ClassVar[dict[str, Any]]

    def __init__(self, **options: Any):
        unknown = sorted(set(options) - set(self.option_defaults))
        if unknown:
            raise GameOptionsError(f"unknown option(s) {unknown} of {self.name}; it takes {sorted(self.option_defaults)}")
        self.options = {**self.option_defaults, **options}

    @property
    @abstractmethod
    def max_moves(self) -> int:
        """The most legal moves a game can take (its own limit: 6 guesses; the maze's move budget)."""

    @abstractmethod
    def new_puzzle(self, rng: random.Random) -> Puzzle:
        ...

    def int_option(self, key: str, low: int, high: int | None = None) -> int:
        value = self.options[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise GameOptionsError(f"option {key} of {self.name} must be an integer {bound}, got {value!r}")
        return value
