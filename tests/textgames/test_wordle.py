"""Wordle's rules: feedback with repeated letters (hand-computed), guesses, the word list."""

from __future__ import annotations

import hashlib
import random

import pytest

from reinforge.textgames.game import GameOptionsError
from reinforge.textgames.wordle import Wordle, WordlePuzzle, feedback

WORDS = ["crane", "abbey", "kebab", "those", "geese", "abide", "speed", "array", "rarer", "eerie", "level", "hello"]


@pytest.mark.parametrize(
    ("secret", "guess", "marks"),
    [
        ("crane", "crane", "GGGGG"),
        ("crane", "hello", "-Y---"),  # crane's e is last, not second; no l, no o
        # kebab for abbey: k gray; e yellow (abbey's e is 4th); b green (3rd); a yellow; the last b
        # yellow (abbey has two b's: one matched in place, one left for it)
        ("abbey", "kebab", "-YGYY"),
        # geese for those: those's one e is matched in place at the end, so the two earlier e's are gray
        ("those", "geese", "---GG"),
        # speed for abide: the first e yellow (abide's one e), the second gray; d yellow
        ("abide", "speed", "--Y-Y"),
        # rarer for array: the middle r green; array's other r makes the first r yellow; a yellow;
        # e gray; the last r gray (no r left)
        ("array", "rarer", "YYG--"),
        # level for eerie: e green in place 2; eerie's two other e's leave one for the second e
        # (yellow); l, v, l gray
        ("eerie", "level", "-G-Y-"),
        # level for hello: l yellow (hello's l's are 3rd and 4th), e green, v gray, the second e gray
        # (hello's one e is already green), the last l yellow (the other l)
        ("hello", "level", "YG--Y"),
    ],
)
def test_feedback_by_hand(secret, guess, marks) -> None:
    assert feedback(secret, guess) == marks


def game(**options) -> Wordle:
    return Wordle(words=WORDS, **options)


def test_a_game_is_won_by_guessing_the_secret() -> None:
    puzzle = WordlePuzzle(game(), "abide")
    first = puzzle.attempt(" Speed \n")
    assert first.legal and first.feedback == "speed --Y-Y 5 left." and not puzzle.over
    won = puzzle.attempt("abide")
    assert won.legal and won.feedback == "abide GGGGG Solved." and puzzle.over and puzzle.solved and puzzle.moves == 2


def test_guesses_outside_the_list_are_illegal_and_do_not_use_a_guess() -> None:
    puzzle = WordlePuzzle(game(), "abide")
    for text in ["zzzzz", "abid", "abides", "ab1de", ""]:
        attempt = puzzle.attempt(text)
        assert not attempt.legal and ("not in the word list" in attempt.feedback or "not five letters" in attempt.feedback)
    assert puzzle.moves == 0 and puzzle.history == [] and not puzzle.over


def test_six_wrong_guesses_lose() -> None:
    puzzle = WordlePuzzle(game(), "abide")
    for word in ["crane", "abbey", "kebab", "those", "geese"]:
        assert puzzle.attempt(word).legal and not puzzle.over
    last = puzzle.attempt("speed")
    assert last.legal and last.feedback.endswith("No guesses left.") and puzzle.over and not puzzle.solved


def test_progress_counts_new_green_places() -> None:
    puzzle = WordlePuzzle(game(), "those")
    assert puzzle.attempt("geese").progress == pytest.approx(2 / 5)  # s, e green
    assert puzzle.attempt("those").progress == pytest.approx(3 / 5)  # t, h, o new


def test_teacher_only_guesses_words_consistent_with_the_feedback_and_solves() -> None:
    g = game()
    for seed in range(20):
        puzzle, rng = g.new_puzzle(random.Random(seed)), random.Random(seed)
        while not puzzle.over:
            guess = puzzle.teacher_move(rng, noise=0.0)
            assert puzzle.consistent(guess)
            assert puzzle.attempt(guess).legal
        assert puzzle.solved  # 12 words: consistent guessing always finds it within 6


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"words": ["abc"]}, "option words"),
        ({"words": []}, "option words"),
        ({"guesses": 0}, "option guesses"),
        ({"answers": 10, "vocabulary": 5}, "option vocabulary"),
        ({"colour": 1}, "unknown option"),
    ],
)
def test_bad_options_are_named(options, message) -> None:
    with pytest.raises(GameOptionsError, match=message):
        Wordle(**({"words": WORDS} if "words" not in options and "answers" not in options else {}), **options)


def test_the_wordfreq_list_is_reproducible() -> None:
    pytest.importorskip("wordfreq", reason="the Wordle word list needs wordfreq: pip install 'reinforge[wordle]'")
    from reinforge.textgames.word_list import five_letter_words

    words = five_letter_words(5000)
    assert len(words) == len(set(words)) == 5000 and all(len(w) == 5 and w.isalpha() and w.islower() for w in words)
    assert words[:5] == ("about", "their", "there", "which", "would")  # most frequent first
    # The whole list, pinned: wordfreq's data is frozen and the extra pins its release (3.1.1).
    assert hashlib.sha256(" ".join(words).encode()).hexdigest() == "1782a07d1b5cb941c17aab5797b584d5ac76a225a0a0b64de2680a85ad8ffec4"
    g = Wordle(answers=500, vocabulary=5000)
    assert set(g.answers) <= g.vocabulary and len(g.answers) == 500


def test_without_wordfreq_the_error_names_the_extra(monkeypatch) -> None:
    import sys

    from reinforge.textgames import word_list

    word_list.five_letter_words.cache_clear()
    monkeypatch.setitem(sys.modules, "wordfreq", None)  # import wordfreq -> ImportError
    with pytest.raises(GameOptionsError, match=r"pip install 'reinforge\[wordle\]'"):
        Wordle(answers=10, vocabulary=20)
    word_list.five_letter_words.cache_clear()
