"""Iterated rock-paper-scissors: three rounds of simultaneous moves; more rounds won wins the game.

Each round both players commit a move without seeing the other's (the referee asks them one after
the other, but the state keeps the first move hidden and the announcement waits until both are in:
`round_complete`). Then each reads "Opponent played paper." and the score. Rock beats scissors,
scissors beat paper, paper beats rock; equal moves tie the round. The game's result: 1 to the
player with more rounds won, -1 to the other, 0 each when they won as many (a draw).

There is no perfect (minimax) player: with simultaneous moves the game has imperfect information;
its equilibrium is uniform play, which the `random` opponent is.
"""

from __future__ import annotations

import random

from reinforge.games.game import Game

MOVES = ("rock", "paper", "scissors")
BEATS = {"rock": "scissors", "scissors": "paper", "paper": "rock"}
ROUNDS = 3

State = tuple[tuple[tuple[str, str], ...], str | None]  # (finished rounds' moves, the first player's hidden move of this round)


def round_winner(first: str, second: str) -> int | None:
    """0 or 1, the player who won the round; None for a tie."""
    if first == second:
        return None
    return 0 if BEATS[first] == second else 1


class RockPaperScissors(Game):
    name = "rock_paper_scissors"
    roles = ("first", "second")
    max_moves = 2 * ROUNDS
    perfect_information = False  # a round's moves are simultaneous

    def initial_state(self, rng: random.Random) -> State:
        return ((), None)

    def to_move(self, state: State) -> int:
        return 0 if state[1] is None else 1

    def legal_moves(self, state: State) -> list[str]:
        return [] if self.is_over(state) else list(MOVES)

    def play(self, state: State, move: str) -> State:
        if move not in MOVES:
            raise ValueError(f"{move!r} is not one of {MOVES}")
        rounds, pending = state
        return (rounds, move) if pending is None else (rounds + ((pending, move),), None)

    def round_complete(self, state: State) -> bool:
        return state[1] is None

    def is_over(self, state: State) -> bool:
        return len(state[0]) == ROUNDS and state[1] is None

    def score(self, state: State) -> tuple[int, int]:
        """Rounds won by each player so far (finished rounds only)."""
        winners = [round_winner(a, b) for a, b in state[0]]
        return winners.count(0), winners.count(1)

    def payoffs(self, state: State) -> tuple[float, float]:
        first, second = self.score(state)
        if first == second:
            return (0.0, 0.0)
        return (1.0, -1.0) if first > second else (-1.0, 1.0)

    def rules(self, player: int) -> str:
        return f"Rock-paper-scissors, {ROUNDS} rounds, both move at once. Reply rock, paper or scissors."

    def view(self, state: State, player: int) -> str:
        mine, theirs = self.score(state)[player], self.score(state)[1 - player]
        return f"Round {len(state[0]) + 1}. Score you {mine}, opponent {theirs}. Your move:"

    def announce(self, state: State, mover: int, move: str, observer: int) -> str:
        return f"Opponent played {move}."
