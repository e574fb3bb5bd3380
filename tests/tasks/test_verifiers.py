"""Verifiers on correct, wrong and malformed answers."""

from __future__ import annotations

import pytest

from reinforge.tasks.verifiers import VERIFIERS, UnknownVerifierError, extract_answer, parse_number, verify
from reinforge.tasks.task import Task


def task(answer: str, verifier: str = "exact", **metadata) -> Task:
    return Task(id="t", prompt="?", answer=answer, verifier=verifier, metadata=metadata)


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<answer>42</answer>", "42"),
        ("think... <answer> 41 </answer> no, <answer>42</answer> done", "42"),
        ("<answer>x <answer>42</answer>", "42"),
        ("  42 \n", "42"),
        ("<answer>42", "<answer>42"),  # unclosed tag: no extraction
        ("42</answer>", "42</answer>"),
        ("<answer>\nmulti\nline\n</answer>", "multi\nline"),
        ("", ""),
    ],
)
def test_extract_answer(response: str, expected: str) -> None:
    assert extract_answer(response) == expected


@pytest.mark.parametrize(
    "response, score",
    [
        ("<answer>Paris</answer>", 1.0),
        ("  paris ", 1.0),
        ("<answer>New   York\n</answer>", 0.0),
        ("<answer>Lyon</answer>", 0.0),
        ("<answer></answer>", 0.0),
        ("", 0.0),
    ],
)
def test_exact(response: str, score: float) -> None:
    assert verify(task("Paris"), response) == score


def test_exact_collapses_whitespace() -> None:
    assert verify(task("New York"), "<answer> new \n york </answer>") == 1.0


@pytest.mark.parametrize(
    "response, score",
    [
        ("<answer>1154</answer>", 1.0),
        ("1154.0", 1.0),
        ("<answer>1.154e3</answer>", 1.0),
        ("1,154", 1.0),
        ("1154.0000001", 0.0),  # an integer reference is matched exactly (no default tolerance)
        ("1155", 0.0),
        ("1154.01", 0.0),
        ("eleven hundred", 0.0),
        ("<answer>nan</answer>", 0.0),
        ("inf", 0.0),
        ("1/0", 0.0),
        ("", 0.0),
    ],
)
def test_numeric(response: str, score: float) -> None:
    assert verify(task("1154", "numeric"), response) == score


def test_numeric_fractions_and_zero() -> None:
    assert verify(task("0.5", "numeric"), "1/2") == 1.0
    assert verify(task("0", "numeric"), "0.0") == 1.0
    assert verify(task("0", "numeric"), "1e-15") == 0.0  # an integer reference is matched exactly
    assert verify(task("0", "numeric", abs_tol=1e-12), "1e-15") == 1.0  # unless the task sets a tolerance
    assert verify(task("0", "numeric"), "1e-3") == 0.0


def test_numeric_bad_reference_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not a number"):
        verify(task("four", "numeric"), "4")


def test_parse_number() -> None:
    assert parse_number(" -3 ") == -3.0 and parse_number("12,345.5") == 12345.5
    assert parse_number("1,2") is None and parse_number("abc") is None


def test_reasoning_gym_verifier() -> None:
    import reasoning_gym

    entry = reasoning_gym.create_dataset("chain_sum", seed=0, size=1)[0]
    rg_task = task(entry["answer"], "reasoning_gym", dataset="chain_sum", entry=entry)
    assert verify(rg_task, f"<answer>{entry['answer']}</answer>") == 1.0
    assert verify(rg_task, "<answer>not a number</answer>") == 0.0
    with pytest.raises(ValueError, match="metadata"):
        verify(task("1", "reasoning_gym"), "<answer>1</answer>")


def test_unknown_verifier_lists_valid_ones() -> None:
    with pytest.raises(UnknownVerifierError) as err:
        verify(task("1", "fuzzy"), "1")
    assert isinstance(err.value, KeyError)
    assert str(err.value) == f"unknown verifier 'fuzzy'; valid: {', '.join(sorted(VERIFIERS))}"
