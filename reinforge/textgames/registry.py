"""Single-agent text games by name, as `task.params.game` names them (task.source: text_game)."""

from __future__ import annotations

from reinforge.textgames.game import GameOptionsError, TextGame
from reinforge.textgames.maze import Maze
from reinforge.textgames.twenty_questions import TwentyQuestions
from reinforge.textgames.wordle import Wordle

TEXT_GAMES: dict[str, type[TextGame]] = {"wordle": Wordle, "twenty_questions": TwentyQuestions, "maze": Maze}


def build_game(name: str, options: dict) -> TextGame:
    """The game with its options checked; GameOptionsError names what is wrong."""
    if name not in TEXT_GAMES:
        raise GameOptionsError(f"unknown text game {name!r}; built-in: {', '.join(TEXT_GAMES)}")
    return TEXT_GAMES[name](**options)
