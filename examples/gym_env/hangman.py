"""Hangman as a gym-style text env: the convention of gymnasium and GEM, with no reinforge import.

    reset(seed=None, options=None) -> (observation, info)
    step(action: str) -> (observation, reward, terminated, truncated, info)

The player is shown the word's letters in alphabetical order and the word with the letters found
so far ("c_t"); it guesses one letter per turn, and saying the whole word wins (reward 1) and
ends the game; a wrong letter or a wrong word costs one of `lives`. The word is `options["answer"]` when the caller gives one (reinforge passes
the task's answer there), else drawn from WORDS with `seed`.
"""

from __future__ import annotations

import random

WORDS = (
    "cat dog sun map cup hat pen box fox net bed jam bus car egg fan hen ice jar key lip mud nut owl pig rat "
    "sky toy van web yak zip ant bat cow elk fig gum hop ink kid log mop oak pot rug sea tea urn vet wax"
).split()


class Hangman:
    def __init__(self, lives: int = 4):
        self.lives = lives
        self.word, self.found, self.left = "", set(), lives

    def reset(self, seed=None, options=None):
        answer = (options or {}).get("answer")
        self.word = answer or random.Random(seed).choice(WORDS)
        self.found, self.left = set(), self.lives
        letters = " ".join(sorted(set(self.word)))
        return f"Guess the word: {self.pattern()} letters: {letters}", {}

    def pattern(self) -> str:
        return "".join(c if c in self.found else "_" for c in self.word)

    def step(self, action):
        guess = action.strip().lower()
        if guess == self.word:
            return f"Solved: {self.word}", 1.0, True, False, {}
        if len(guess) == 1 and guess.isalpha() and guess in self.word:
            self.found.add(guess)
            return f"yes: {self.pattern()}", 0.0, False, False, {}
        self.left -= 1
        if self.left == 0:
            return f"Out of lives: {self.word}", 0.0, True, False, {}
        return f"no: {self.pattern()}", 0.0, False, False, {}
