"""The Game protocol: the rules of a turn-based game for several players, in text, without tokens.

A game is pure rules: states, whose move it is, legal moves, the result. Everything a player is
shown goes through `view(state, player)` and `announce(...)`, which must only use what that
player may know: hidden information (a poker hand) never reaches another player's text, and so
never another player's tokens (reinforge.games.match builds each player's token stream from
these texts alone).

Moves are short canonical strings ("5", "bet"): the move format a tiny model can learn. A
policy's turn text is turned into a move by `parse_move` (whitespace stripped, nothing else
forgiven); a text that is not a legal move is an illegal move (the match counts it).

Simultaneous moves: a game whose players act at once in a round (rock-paper-scissors) still asks
them one at a time (`to_move` is the next player of the round yet to commit), but its state holds
the round's committed moves hidden: `view` never shows them, and `round_complete(state)` is false
until every player has committed; the referee holds each move's announcement until then, so no
player reads another's move of the round before its own is in (reinforge.games.match).

States are immutable and hashable, so a perfect player can search and memoize them.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import Any, ClassVar

State = Any


class Game(ABC):
    name: ClassVar[str]
    roles: ClassVar[tuple[str, ...]]  # one name per player, in seating order (X, O; first, second)
    max_moves: ClassVar[int]  # the longest legal game, in moves of all players
    perfect_information: ClassVar[bool] = True
    cooperative: ClassVar[bool] = False  # the players share one result (payoffs equal, not zero-sum)
    deal_per_task: ClassVar[bool] = False  # every game of a task starts from the same deal (one question per task)

    @property
    def num_players(self) -> int:
        return len(self.roles)

    @abstractmethod
    def initial_state(self, rng: random.Random) -> State:
        """A new game (a deal of cards uses `rng`; a board game ignores it)."""

    @abstractmethod
    def to_move(self, state: State) -> int:
        """The player (index into `roles`) whose move it is; only called while not over."""

    @abstractmethod
    def legal_moves(self, state: State) -> list[str]:
        ...

    @abstractmethod
    def play(self, state: State, move: str) -> State:
        """The state after the player to move plays `move` (a legal move)."""

    @abstractmethod
    def is_over(self, state: State) -> bool:
        ...

    @abstractmethod
    def payoffs(self, state: State) -> tuple[float, ...]:
        """Each player's result of a finished game; zero-sum (they add up to 0), 0 each on a draw;
        a cooperative game pays every player the same."""

    @abstractmethod
    def rules(self, player: int) -> str:
        """The first line a player reads: the game, its role, how to write a move."""

    @abstractmethod
    def view(self, state: State, player: int) -> str:
        """What `player` sees of `state` when asked to move: only its own information."""

    @abstractmethod
    def announce(self, state: State, mover: int, move: str, observer: int) -> str:
        """How `observer` learns that `mover` played `move` in `state` (the state before it)."""

    def round_complete(self, state: State) -> bool:
        """Whether every move played so far may be announced: always, in a turn-based game; in a
        simultaneous one, only once every player has committed its move of the round."""
        return True

    def parse_move(self, text: str) -> str:
        return text.strip()

    def demonstration_move(self, state: State, player: int, rng: random.Random) -> str:
        """The warm-up's move (reinforge.games.tasks.demonstration): a legal move at random. A game
        whose random moves would teach the policy to ignore what it sees overrides it
        (describer_guesser)."""
        return rng.choice(self.legal_moves(state))

    @property
    def referee(self) -> type | None:
        """The referee class of a game whose state lives in another library's env object (a subclass
        of games.match.Match: games.textarena_game); None, the default: games.match.Match referees
        it. games.match.new_match starts a game with it; the rules never import their referee."""
        return None

    @property
    def max_payoff(self) -> float:
        """The largest payoff a player can get (a forfeit costs the forfeiter this much)."""
        return 1.0
