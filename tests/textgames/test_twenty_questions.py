"""Twenty questions: the simulated answerer, the move forms, illegal moves, the guess, the limits."""

from __future__ import annotations

import random

import pytest

from reinforge.textgames.game import GameOptionsError
from reinforge.textgames.twenty_questions import CATALOG, TwentyQuestions, TwentyQuestionsPuzzle, parse_move


def test_every_object_can_be_told_apart() -> None:
    names = sorted(CATALOG)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert any(
                CATALOG[a][k] is not None and CATALOG[b][k] is not None and CATALOG[a][k] != CATALOG[b][k] for k in CATALOG[a]
            ), (a, b)


@pytest.mark.parametrize(
    ("text", "move"),
    [("is it animal?", ("ask", "animal")), ("  Is It WINGED ", ("ask", "winged")), ("guess cat", ("guess", "cat")),
     ("Guess Cat?", ("guess", "cat")), ("is it a cat?", None), ("cat", None), ("guess", None), ("", None)],
)
def test_move_forms(text, move) -> None:
    assert parse_move(text) == move


def test_answers_come_from_the_attributes() -> None:
    p = TwentyQuestionsPuzzle(TwentyQuestions(), "parrot")
    assert p.attempt("is it animal?").feedback == "yes. 19 left."
    assert p.attempt("is it metal?").feedback == "no. 18 left."
    assert p.attempt("is it wild?").feedback == "unknown. 17 left."  # a parrot may be wild or a pet
    assert p.moves == 3 and not p.over


def test_progress_is_the_share_of_candidates_ruled_out() -> None:
    p = TwentyQuestionsPuzzle(TwentyQuestions(objects=["cat", "parrot", "eagle", "car"]), "eagle")
    assert p.attempt("is it winged?").progress == pytest.approx(2 / 4)  # cat and car ruled out
    assert p.attempt("is it wild?").progress == pytest.approx(0.0)  # parrot's "wild" is unknown: it stays
    assert p.candidates() == ["eagle", "parrot"]


@pytest.mark.parametrize(
    ("text", "why"),
    [("is it furry?", "not one of the attributes"), ("guess unicorn", "not one of the objects"), ("what is it", "ask 'is it X?'")],
)
def test_illegal_moves_are_explained_and_do_not_count(text, why) -> None:
    p = TwentyQuestionsPuzzle(TwentyQuestions(), "cat")
    attempt = p.attempt(text)
    assert not attempt.legal and why in attempt.feedback and p.moves == 0 and not p.asked


def test_a_question_asked_twice_is_illegal() -> None:
    p = TwentyQuestionsPuzzle(TwentyQuestions(), "cat")
    assert p.attempt("is it pet?").legal
    assert not p.attempt("is it pet").legal


def test_the_guess_ends_the_game() -> None:
    right = TwentyQuestionsPuzzle(TwentyQuestions(), "cat")
    assert right.attempt("guess cat").feedback == "Right." and right.over and right.solved
    wrong = TwentyQuestionsPuzzle(TwentyQuestions(), "cat")
    assert wrong.attempt("guess horse").feedback == "Wrong, it was cat." and wrong.over and not wrong.solved


def test_after_the_last_question_only_a_guess_is_legal() -> None:
    p = TwentyQuestionsPuzzle(TwentyQuestions(max_questions=2), "shark")
    assert p.attempt("is it animal?").legal and p.attempt("is it aquatic?").legal
    late = p.attempt("is it big?")
    assert not late.legal and "No questions left" in late.feedback
    assert p.attempt("guess shark").legal and p.solved


def test_teacher_finds_every_object() -> None:
    game = TwentyQuestions()
    for name in sorted(CATALOG):
        p, rng = TwentyQuestionsPuzzle(game, name), random.Random(name)
        while not p.over:
            assert p.attempt(p.teacher_move(rng, noise=0.0)).legal
        assert p.solved and p.moves <= 10, (name, p.asked)  # 16 objects: a few splitting questions, then the guess


def test_own_catalog_and_bad_options() -> None:
    game = TwentyQuestions(catalog={"Sun": {"hot": True}, "moon": {"hot": False}})
    p = game.new_puzzle(random.Random(0))
    assert p.attempt("is it hot?").feedback in ("yes. 19 left.", "no. 19 left.")
    with pytest.raises(GameOptionsError, match="option catalog"):
        TwentyQuestions(catalog={"sun": {"hot": True}, "moon": {"cold": False}})
    with pytest.raises(GameOptionsError, match="option objects"):
        TwentyQuestions(objects=["cat", "unicorn"])
    with pytest.raises(GameOptionsError, match="option max_questions"):
        TwentyQuestions(max_questions=0)
