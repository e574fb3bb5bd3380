"""Describer and guesser: a cooperative game where two roles must communicate (a Lewis signalling game).

The describer sees a secret thing (one of THINGS) and gives a clue: one colour (its number in the
list of COLOURS). The guesser sees only the clue's colour, never the secret, and guesses the thing
(its number in the list of THINGS). Both get the same reward: +1 when the
guess is right, 0 when it is wrong (a loss), and -1 when either forfeits by illegal moves, so a
wrong guess is still better than no move (Lewis 1969, "Convention"; as an RL benchmark for emergent
communication, e.g. Lazaridou et al. 2017, "Multi-agent cooperation and the emergence of
(natural) language").

Any one-to-one code from things to colours lets the pair win every game, so the two players must
agree on one; the `literal` fixed player (reinforge.games.opponents) uses the things' true colours
(a cherry is red), which gives each trained role its own measure: the describer's clue quality
is its success with the literal guesser, the guesser's accuracy its success with the literal describer.

Hidden information: the secret is in the describer's view only; the guesser's messages hold the
rules, the list of things and the clue (a test swaps the secret and finds the guesser's tokens unchanged).
"""

from __future__ import annotations

import random

from reinforge.games.game import Game

# Moves are list numbers, one token each: a multi-token word would let the negative advantage of a
# wrong answer fall on its spelling too (a wrong "che-rry" teaches "che-" to end otherwise: an
# illegal move). The colours are listed in another order than the things, so the code to learn is
# not "the same number".
COLOUR_OF = {"cherry": "red", "banana": "yellow", "lime": "green", "sky": "blue"}
THINGS = tuple(COLOUR_OF)
COLOURS = ("blue", "red", "yellow", "green")
ROLES = ("describer", "guesser")


def numbered(words: tuple[str, ...]) -> str:
    return " ".join(f"{i} {word}" for i, word in enumerate(words, 1))


def colour_number(thing: str) -> str:
    """The literal describer's clue for `thing`: the number of its true colour."""
    return str(COLOURS.index(COLOUR_OF[thing]) + 1)


def thing_number(colour: str) -> str:
    """The literal guesser's answer to `colour`: the number of the thing of that colour."""
    return str(THINGS.index(next(t for t, c in COLOUR_OF.items() if c == colour)) + 1)


# The warm-up's wrong codes (DescriberGuesser.demonstration_move): shifts along THINGS.
DEMO_SHIFT_DESCRIBER = 1
DEMO_SHIFT_GUESSER = 2


def wrong_code_move(state: tuple[str, str, str], player: int) -> str:
    """The describer: the colour of the thing DEMO_SHIFT_DESCRIBER after the secret; the guesser:
    the thing DEMO_SHIFT_GUESSER after the one of the clue's true colour."""
    secret, clue, _ = state
    if player == 0:
        return colour_number(THINGS[(THINGS.index(secret) + DEMO_SHIFT_DESCRIBER) % len(THINGS)])
    literal = int(thing_number(COLOURS[int(clue) - 1])) - 1
    return str((literal + DEMO_SHIFT_GUESSER) % len(THINGS) + 1)


class DescriberGuesser(Game):
    """State: (secret thing, clue: a colour's number or "", guess: a thing's number or "")."""

    name = "describer_guesser"
    roles = ROLES
    max_moves = 2
    perfect_information = False
    cooperative = True
    deal_per_task = True  # a task is one secret: its group's games compare clues (and guesses) for it

    def initial_state(self, rng: random.Random) -> tuple[str, str, str]:
        return (rng.choice(THINGS), "", "")

    def to_move(self, state: tuple[str, str, str]) -> int:
        return 0 if not state[1] else 1

    def legal_moves(self, state: tuple[str, str, str]) -> list[str]:
        if self.is_over(state):
            return []
        return [str(i) for i in range(1, (len(COLOURS) if not state[1] else len(THINGS)) + 1)]

    def play(self, state: tuple[str, str, str], move: str) -> tuple[str, str, str]:
        if move not in self.legal_moves(state):
            raise ValueError(f"{move!r} is not a legal move now ({self.legal_moves(state)})")
        secret, clue, _ = state
        return (secret, move, "") if not clue else (secret, clue, move)

    def is_over(self, state: tuple[str, str, str]) -> bool:
        return bool(state[2])

    def payoffs(self, state: tuple[str, str, str]) -> tuple[float, float]:
        shared = 1.0 if THINGS[int(state[2]) - 1] == state[0] else 0.0
        return (shared, shared)

    def rules(self, player: int) -> str:
        if player == 0:
            return "Describe and guess, as a team. You are the describer: give a colour so the guesser finds the secret. Reply with its number."
        return "Describe and guess, as a team. You are the guesser: find the secret thing from the clue. Reply with its number."

    # What decides the move comes last, right before the reply: the secret for the describer, the
    # clue's colour for the guesser (a tiny model conditions most easily on the nearest tokens).
    def view(self, state: tuple[str, str, str], player: int) -> str:
        if player == 0:
            return f"Colours {numbered(COLOURS)}. Your clue for {state[0]}:"
        clue = COLOURS[int(state[1]) - 1] if state[1] else "no clue"  # the describer forfeited before its clue
        return f"Things {numbered(THINGS)}. Your guess for {clue}:"

    def demonstration_move(self, state: tuple[str, str, str], player: int, rng: random.Random) -> str:
        """Half the warm-up's moves follow a wrong one-to-one code, half are random-legal.

        Random moves alone teach the marginal: after 100 warm-up steps the micro model's answer
        distribution was the same for all four secrets (to 3 decimals), and RL from there did not
        learn to read the secret (docs/games.md). A code makes the answer depend on what the
        player sees; a wrong one gives nothing of the literal code away: the describer's clue is
        the colour of the *next* thing (DEMO_SHIFT_DESCRIBER), the guesser's answer the thing two
        after the clue's (DEMO_SHIFT_GUESSER), so with the literal partner each wins no game and
        together they win none either (shifts of 1, 2 and 3 are never 0 mod 4). The random half
        keeps every answer likely enough for RL to sample it."""
        if rng.random() < 0.5:
            return rng.choice(self.legal_moves(state))
        return wrong_code_move(state, player)

    def announce(self, state: tuple[str, str, str], mover: int, move: str, observer: int) -> str:
        return "The describer gave its clue." if mover == 0 else f"Guess {THINGS[int(move) - 1]}."
