"""Kuhn poker (Kuhn 1950): a three-card deck (J < Q < K), one card each, one betting round.

Both players ante 1 chip. The first player passes or bets 1; after a pass the second may pass
(showdown for 1) or bet, and the first then passes (folds, losing 1) or bets (calls: showdown
for 2); after a bet the second passes (folds, losing 1) or bets (calls: showdown for 2). At a
showdown the higher card wins the pot. Payoffs are chips won: +-1 or +-2, zero-sum, no draws.

Imperfect information: a player's view holds its own card and the public betting, never the
other card (a finished game is not shown to anyone, so not even the showdown reveals it).
"""

from __future__ import annotations

import random

from reinforge.games.game import Game

CARDS = ("J", "Q", "K")
ACTIONS = ("pass", "bet")
TERMINAL = ("pp", "bb", "pbp", "pbb", "bp")
ROLES = ("first", "second")


class KuhnPoker(Game):
    """State: (card of the first player, card of the second, history of 'p' / 'b')."""

    name = "kuhn_poker"
    roles = ROLES
    max_moves = 3
    perfect_information = False

    def initial_state(self, rng: random.Random) -> tuple[str, str, str]:
        first, second = rng.sample(CARDS, 2)
        return (first, second, "")

    def to_move(self, state: tuple[str, str, str]) -> int:
        return len(state[2]) % 2

    def legal_moves(self, state: tuple[str, str, str]) -> list[str]:
        return [] if self.is_over(state) else list(ACTIONS)

    def play(self, state: tuple[str, str, str], move: str) -> tuple[str, str, str]:
        if move not in ACTIONS:
            raise ValueError(f"{move!r} is not one of {ACTIONS}")
        return (state[0], state[1], state[2] + move[0])

    def is_over(self, state: tuple[str, str, str]) -> bool:
        return state[2] in TERMINAL

    def payoffs(self, state: tuple[str, str, str]) -> tuple[float, float]:
        first, second, history = state
        if history == "bp":
            return (1.0, -1.0)  # the second player folded
        if history == "pbp":
            return (-1.0, 1.0)  # the first player folded
        stake = 2.0 if "b" in history else 1.0
        first_wins = CARDS.index(first) > CARDS.index(second)
        return (stake, -stake) if first_wins else (-stake, stake)

    @property
    def max_payoff(self) -> float:
        return 2.0

    def rules(self, player: int) -> str:
        return f"Kuhn poker, cards J<Q<K. You act {ROLES[player]}. Reply pass or bet."

    def view(self, state: tuple[str, str, str], player: int) -> str:
        return f"Your card {state[player]}. Your move:"

    def announce(self, state: tuple[str, str, str], mover: int, move: str, observer: int) -> str:
        return f"Opponent: {move}."
