"""Wordle: find a secret five-letter word in six guesses, told for each letter green / yellow / gray.

Feedback follows the game's rules for repeated letters (the New York Times' Wordle): a letter in
the right place is green (G); the secret's other letters, each usable once, then make the guess's
remaining letters yellow (Y) from left to right while copies are left; every other letter is gray
(-). So guessing "speed" for "abide" gives "--Y-Y": the first e is yellow, the second gray (the
secret has one e), and the d yellow.

A guess is one word of the vocabulary (textgames.word_list, or the game's own `words`), in any
case, surrounding spaces ignored; anything else is an illegal move (it does not use a guess).
The game is won when a guess is the secret, lost after `guesses` wrong guesses.

Options: `answers` (secrets are drawn from the most frequent n words), `vocabulary` (the n most
frequent words are accepted as guesses), `words` (your own list instead: secrets and guesses),
`guesses` (6).
"""

from __future__ import annotations

import random

from reinforge.textgames.game import Attempt, GameOptionsError, Puzzle, TextGame
from reinforge.textgames.word_list import five_letter_words, is_five_letter_word

GREEN, YELLOW, GRAY = "G", "Y", "-"


def feedback(secret: str, guess: str) -> str:
    """Per letter of `guess`: G (right place), Y (elsewhere in the secret, copies counted), - (not)."""
    marks = [GRAY] * len(guess)
    left: dict[str, int] = {}  # the secret's letters not matched in place, with their counts
    for i, (s, g) in enumerate(zip(secret, guess)):
        if s == g:
            marks[i] = GREEN
        else:
            left[s] = left.get(s, 0) + 1
    for i, g in enumerate(guess):
        if marks[i] != GREEN and left.get(g, 0) > 0:
            marks[i] = YELLOW
            left[g] -= 1
    return "".join(marks)


class Wordle(TextGame):
    name = "wordle"
    option_defaults = {"answers": 500, "vocabulary": 5000, "words": None, "guesses": 6}

    def __init__(self, **options):
        super().__init__(**options)
        self.guesses = self.int_option("guesses", 1, 20)
        words = self.options["words"]
        if words is not None:
            if not isinstance(words, list) or not words or not all(isinstance(w, str) and is_five_letter_word(w) for w in words):
                raise GameOptionsError("option words of wordle must be a non-empty list of five-letter lowercase words a-z")
            self.answers = tuple(dict.fromkeys(words))
            self.vocabulary = frozenset(self.answers)
        else:
            answers, vocabulary = self.int_option("answers", 1), self.int_option("vocabulary", 1)
            if vocabulary < answers:
                raise GameOptionsError(f"option vocabulary={vocabulary} of wordle must be >= answers={answers} (every secret can be guessed)")
            self.vocabulary = frozenset(five_letter_words(vocabulary))
            self.answers = five_letter_words(answers)

    @property
    def max_moves(self) -> int:
        return self.guesses

    def new_puzzle(self, rng: random.Random) -> "WordlePuzzle":
        return WordlePuzzle(self, rng.choice(self.answers))


class WordlePuzzle(Puzzle):
    def __init__(self, game: Wordle, secret: str):
        self.game, self.secret = game, secret
        self.history: list[tuple[str, str]] = []  # (guess, feedback)
        self.moves = 0
        self._candidates: list[str] | None = None  # the teacher's possible secrets, narrowed guess by guess

    @property
    def answer(self) -> str:
        return self.secret

    @property
    def over(self) -> bool:
        return self.solved or len(self.history) >= self.game.guesses

    @property
    def solved(self) -> bool:
        return bool(self.history) and self.history[-1][0] == self.secret

    def intro(self) -> str:
        return (
            f"Wordle. Guess the secret five-letter word in {self.game.guesses} tries. After each guess: "
            "G right place, Y in the word elsewhere, - not in it. Reply with one word."
        )

    def attempt(self, text: str) -> Attempt:
        guess = text.strip().lower()
        if guess not in self.game.vocabulary:
            why = "not five letters" if not is_five_letter_word(guess) else "not in the word list"
            return Attempt(False, f"{guess[:12]!r} is {why}.")
        marks = feedback(self.secret, guess)
        greens_before = self.greens()
        self.history.append((guess, marks))
        self.moves += 1
        if self._candidates is not None:
            self._candidates = [w for w in self._candidates if feedback(w, guess) == marks]
        left = self.game.guesses - len(self.history)
        tail = "Solved." if self.solved else ("No guesses left." if left == 0 else f"{left} left.")
        return Attempt(True, f"{guess} {marks} {tail}", progress=(len(self.greens()) - len(greens_before)) / 5)

    def greens(self) -> set[int]:
        return {i for _, marks in self.history for i, m in enumerate(marks) if m == GREEN}

    def consistent(self, word: str) -> bool:
        return all(feedback(word, guess) == marks for guess, marks in self.history)

    def teacher_move(self, rng: random.Random, noise: float) -> str:
        """A possible secret, consistent with all feedback so far (a fair human strategy, not
        optimal), or (with probability `noise`) any possible secret."""
        if self._candidates is None:
            self._candidates = [w for w in self.game.answers if self.consistent(w)]
        candidates = self._candidates
        if rng.random() < noise or not candidates:
            return rng.choice(self.game.answers)
        return rng.choice(candidates)
