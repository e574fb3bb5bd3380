"""Fixed players that answer without the engine: random-legal, perfect (minimax), Kuhn equilibrium,
literal (describer_guesser's true-colour code).

An opponent is `choose(game, state, player, rng) -> move`; it may read only what `player` may
know (the Kuhn player reads its own card and the public betting, never the other card).
`OPPONENTS` names them for the config; `check_opponent` says which games each can play.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Protocol

from reinforge.games.game import Game, State
from reinforge.games.describer_guesser import COLOURS, colour_number, thing_number
from reinforge.games.kuhn_poker import CARDS


class Opponent(Protocol):
    def __call__(self, game: Game, state: State, player: int, rng: random.Random) -> str: ...


def random_legal(game: Game, state: State, player: int, rng: random.Random) -> str:
    """A legal move, uniformly at random."""
    return rng.choice(game.legal_moves(state))


def _perfect_value(game: Game):
    """value(state): the payoff of the player to move under perfect play by both (negamax),
    memoized per game instance; small perfect-information games only (tic-tac-toe: 5,478 states)."""

    @lru_cache(maxsize=None)
    def value(state: State) -> float:
        if game.is_over(state):
            return _payoff_of_mover(game, state)
        return max(-value(game.play(state, move)) for move in game.legal_moves(state))

    return value


def _payoff_of_mover(game: Game, state: State) -> float:
    """At a finished state, the payoff of the player who would move next (two-player, alternating)."""
    return game.payoffs(state)[game.to_move(state)]


def minimax(game: Game, state: State, player: int, rng: random.Random) -> str:
    """A perfect player: a move of best minimax value, ties broken at random (so it is not one
    fixed line of play). Two-player, zero-sum, perfect information, alternating moves."""
    value = game.__dict__.get("_perfect_value")
    if value is None:  # one memo per game object, filled on first use
        value = game.__dict__["_perfect_value"] = _perfect_value(game)
    scored = [(-value(game.play(state, move)), move) for move in game.legal_moves(state)]
    best = max(score for score, _ in scored)
    return rng.choice([move for score, move in scored if score == best])


# Kuhn's equilibrium family (Kuhn 1950; e.g. Hoehn et al. 2005, "Effective short-term opponent
# exploitation in simplified poker", table 1): the first player bets J with alpha, K with 3*alpha,
# never Q; after pass-bet calls with Q at alpha + 1/3, always with K, never with J. The second
# player, facing a bet, calls with K, with Q at 1/3, never with J; facing a pass, bets K, bluffs J
# at 1/3 and checks Q. The game's value for the first player is -1/18 for every alpha in [0, 1/3].
KUHN_ALPHA = 1 / 6


def kuhn_bet_probability(card: str, history: str) -> float:
    """The equilibrium player's probability of betting with `card` after the public `history`."""
    rank = CARDS.index(card)
    return {
        "": (KUHN_ALPHA, 0.0, 3 * KUHN_ALPHA),  # first player opens
        "pb": (0.0, KUHN_ALPHA + 1 / 3, 1.0),  # first player, facing a bet after passing
        "b": (0.0, 1 / 3, 1.0),  # second player, facing a bet
        "p": (1 / 3, 0.0, 1.0),  # second player, after a pass
    }[history][rank]


def kuhn_equilibrium(game: Game, state: State, player: int, rng: random.Random) -> str:
    """A Nash-equilibrium player of Kuhn poker (alpha = 1/6); reads only its own card."""
    return "bet" if rng.random() < kuhn_bet_probability(state[player], state[2]) else "pass"


def literal(game: Game, state: State, player: int, rng: random.Random) -> str:
    """describer_guesser with the things' true colours: as describer, the secret's colour; as
    guesser, the thing of the clue's colour (it reads the clue only, never the secret)."""
    secret, clue, _ = state
    if player == 0:
        return colour_number(secret)
    return thing_number(COLOURS[int(clue) - 1])


OPPONENTS: dict[str, Opponent] = {
    "random": random_legal, "minimax": minimax, "kuhn_equilibrium": kuhn_equilibrium, "literal": literal,
}


def check_opponent(name: str, game: Game) -> None:
    """Raises ValueError when opponent `name` does not exist or cannot play `game`."""
    if name not in OPPONENTS:
        raise ValueError(f"unknown player {name!r}; fixed players: {', '.join(OPPONENTS)}, or a trainable policy named in `policies:` (default: 'policy')")
    if name == "minimax" and (not game.perfect_information or game.num_players != 2 or game.max_moves > 9):
        raise ValueError(f"minimax searches the whole game tree: small two-player perfect-information games only (tictactoe), not {game.name}")
    if name == "kuhn_equilibrium" and game.name != "kuhn_poker":
        raise ValueError(f"kuhn_equilibrium plays kuhn_poker only, not {game.name}")
    if name == "literal" and game.name != "describer_guesser":
        raise ValueError(f"literal plays describer_guesser only, not {game.name}")
