"""Games by name, as `task.params.game` names them (task.source: game)."""

from __future__ import annotations

from reinforge.games.connect_four import ConnectFour
from reinforge.games.game import Game
from reinforge.games.kuhn_poker import KuhnPoker
from reinforge.games.rock_paper_scissors import RockPaperScissors
from reinforge.games.tictactoe import TicTacToe

GAMES: dict[str, type[Game]] = {
    "tictactoe": TicTacToe, "connect_four": ConnectFour, "kuhn_poker": KuhnPoker, "rock_paper_scissors": RockPaperScissors,
}


def get_game(name: str) -> Game:
    if name not in GAMES:
        raise ValueError(f"unknown game {name!r}; built-in: {', '.join(GAMES)}")
    return GAMES[name]()
