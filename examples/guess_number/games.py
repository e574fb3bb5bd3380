"""The task source of guess-the-number: secret numbers, and a teacher's games for the warm-up.

Named in the recipe as `task.source: "./games.py:load"`; reinforge calls `load(cfg, seed)` with the
recipe's `task` section before any model is built, so a bad parameter stops the run at once. The
parameters come from `task.params`:

    low, high          the secret's range, inclusive (default 1..16)
    binary_search      fraction of the teacher's games played by halving the range (default 0.35);
                       the others step one at a time from the middle (8, 9, 10, ...), which finds
                       only secrets near the middle within a few guesses

The teacher is deliberately mixed, so the warm-up leaves room for RL: where both habits share a
position (after "8", "higher"), the warm-up copies the more frequent one, the slow scan. Halving
solves every secret in 1..16 within 5 guesses; scanning only 4..12. RL, rewarded for solving,
should find out which habit pays.

Held out: each secret of the range once. Every game starts from the same prompt (the secret is
hidden), so held-out games cannot be memorised: greedy accuracy on them is the fraction of secrets
the policy's deterministic strategy finds.
"""

from __future__ import annotations

import random

from reinforge.tasks.task import Task, TaskSplits

DEFAULTS = {"low": 1, "high": 16, "binary_search": 0.35}


def params(cfg) -> dict:
    unknown = set(cfg.params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"task.params: unknown keys {sorted(unknown)}; guess-the-number takes {sorted(DEFAULTS)}")
    p = {**DEFAULTS, **cfg.params}
    if not (isinstance(p["low"], int) and isinstance(p["high"], int) and p["low"] < p["high"]):
        raise ValueError(f"task.params: low and high must be integers with low < high, got {p['low']!r}, {p['high']!r}")
    if not 0.0 <= p["binary_search"] <= 1.0:
        raise ValueError(f"task.params.binary_search is a fraction of games in [0, 1], got {p['binary_search']!r}")
    return p


def halving_game(secret: int, low: int, high: int) -> list[int]:
    """The guesses of a binary search: always the middle of what is still possible."""
    guesses = []
    while True:
        guess = (low + high) // 2
        guesses.append(guess)
        if guess == secret:
            return guesses
        low, high = (guess + 1, high) if secret > guess else (low, guess - 1)


def scanning_game(secret: int, low: int, high: int) -> list[int]:
    """The guesses of a slow player: the middle first, then one step at a time toward the secret."""
    guess = (low + high) // 2
    step = 1 if secret >= guess else -1
    return list(range(guess, secret + step, step))


def transcript(secret: int, guesses: list[int]) -> list[dict]:
    """A game as the chat messages that follow the prompt (assistant guesses, user replies)."""
    messages = []
    for guess in guesses:
        messages.append({"role": "assistant", "content": str(guess)})
        if guess != secret:
            messages.append({"role": "user", "content": "higher" if secret > guess else "lower"})
    return messages


def prompt(low: int, high: int) -> str:
    return f"I picked a number from {low} to {high}. Guess it."


def load(cfg, seed: int) -> TaskSplits:
    p = params(cfg)
    low, high = p["low"], p["high"]
    rng = random.Random(seed)
    train = []
    for i in range(cfg.train_size):
        secret = rng.randint(low, high)
        play = halving_game if rng.random() < p["binary_search"] else scanning_game
        train.append(
            Task(id=f"game-{i}", prompt=prompt(low, high), answer=str(secret), verifier="numeric",
                 demonstration=transcript(secret, play(secret, low, high)))
        )
    held_out = [
        Task(id=f"secret-{n}", prompt=prompt(low, high), answer=str(n), verifier="numeric",
             demonstration=transcript(n, halving_game(n, low, high)))
        for n in range(low, high + 1)
    ]
    return TaskSplits(train=train, eval=held_out)
