"""Games by name, as `task.params.game` names them (task.source: game)."""

from __future__ import annotations

from reinforge.games.connect_four import ConnectFour
from reinforge.games.describer_guesser import DescriberGuesser
from reinforge.games.game import Game
from reinforge.games.kuhn_poker import KuhnPoker
from reinforge.games.rock_paper_scissors import RockPaperScissors
from reinforge.games.tictactoe import TicTacToe

TEXTARENA_PREFIX = "textarena:"
GAMES: dict[str, type[Game]] = {
    "tictactoe": TicTacToe, "connect_four": ConnectFour, "kuhn_poker": KuhnPoker, "rock_paper_scissors": RockPaperScissors,
    "describer_guesser": DescriberGuesser,
}


def get_game(name: str) -> Game:
    if name.startswith(TEXTARENA_PREFIX):  # a textarena game by its env id (games.textarena_game)
        from reinforge.games.textarena_game import textarena_game

        return textarena_game(name[len(TEXTARENA_PREFIX) :])
    if name not in GAMES:
        raise ValueError(f"unknown game {name!r}; built-in: {', '.join(GAMES)}, or a textarena game as '{TEXTARENA_PREFIX}TicTacToe-v0'")
    return GAMES[name]()
