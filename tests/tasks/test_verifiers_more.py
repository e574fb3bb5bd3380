"""The math, multiple_choice, json_schema and regex verifiers: correct, wrong and malformed answers."""

from __future__ import annotations

import threading

import pytest

from reinforge.tasks.verifiers import VERIFIERS, parse_choice, verify
from reinforge.tasks.task import Task


def task(answer: str, verifier: str, **metadata) -> Task:
    return Task(id="t", prompt="q", answer=answer, verifier=verifier, metadata=metadata)


def test_new_verifiers_are_registered() -> None:
    assert {"math", "multiple_choice", "json_schema", "regex"} <= set(VERIFIERS)


# --------------------------------------------------------------------------- math


@pytest.mark.parametrize(
    "gold, response",
    [
        ("\\frac{1}{2}", "<answer>0.5</answer>"),
        ("\\frac{1}{2}", "so the result is \\boxed{\\frac{2}{4}}"),
        ("1/2", "<answer>$\\frac{1}{2}$</answer>"),
        ("(x+1)^2", "<answer>x^2+2x+1</answer>"),
        ("\\sqrt{2}", "<answer>\\sqrt{2}</answer>"),
        ("42", "The answer is <answer>42</answer>"),
    ],
)
def test_math_accepts_equal_answers(gold: str, response: str) -> None:
    assert verify(task(gold, "math"), response) == 1.0


@pytest.mark.parametrize(
    "gold, response",
    [("\\frac{1}{2}", "<answer>1/3</answer>"), ("(x+1)^2", "<answer>x^2+1</answer>"), ("42", "\\boxed{41}")],
)
def test_math_rejects_wrong_answers(gold: str, response: str) -> None:
    assert verify(task(gold, "math"), response) == 0.0


@pytest.mark.parametrize("response", ["", "<answer></answer>", "<answer>}{\\frac</answer>", "<answer>\\boxed{</answer>"])
def test_math_scores_malformed_answers_zero(response: str) -> None:
    assert verify(task("3", "math"), response) == 0.0


def test_math_unparseable_reference_is_a_data_error() -> None:
    with pytest.raises(ValueError, match="not parseable math"):
        verify(task("", "math"), "3")


def test_math_works_outside_the_main_thread() -> None:
    # math-verify's own timeout uses SIGALRM, which only works in the main thread; the scorer
    # calls verifiers from worker threads, so the verifier must turn it off.
    results: list[object] = []

    def run() -> None:
        try:
            results.append(verify(task("\\frac{1}{2}", "math"), "<answer>0.5</answer>"))
        except Exception as err:  # noqa: BLE001
            results.append(err)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)
    assert results == [1.0]


# --------------------------------------------------------------------------- multiple choice


@pytest.mark.parametrize(
    "response",
    ["B", "b", "(B)", "B)", "B.", "answer: B", "Answer: b", "The answer is (B).", "**B**", "reasoning... <answer>(b)</answer>"],
)
def test_multiple_choice_accepts_the_letter_in_common_forms(response: str) -> None:
    assert verify(task("B", "multiple_choice"), response) == 1.0


@pytest.mark.parametrize("response", ["C", "(a)", "answer: D"])
def test_multiple_choice_rejects_other_letters(response: str) -> None:
    assert verify(task("B", "multiple_choice"), response) == 0.0


@pytest.mark.parametrize("response", ["", "AB", "B and C", "answer:", "(B", "12", "<answer>maybe B</answer>"])
def test_multiple_choice_scores_malformed_answers_zero(response: str) -> None:
    assert verify(task("B", "multiple_choice"), response) == 0.0


def test_multiple_choice_reference_must_be_a_letter() -> None:
    assert parse_choice("(c)") == "C"
    with pytest.raises(ValueError, match="not an option letter"):
        verify(task("Paris", "multiple_choice"), "B")


# --------------------------------------------------------------------------- JSON schema

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
}


@pytest.mark.parametrize(
    "response",
    ['{"name": "Ada", "age": 36}', '<answer>{"age": 0, "name": ""}</answer>', '```json\n{"name": "Ada", "age": 36}\n```'],
)
def test_json_schema_accepts_valid_documents(response: str) -> None:
    assert verify(task("", "json_schema", schema=SCHEMA), response) == 1.0


@pytest.mark.parametrize("response", ['{"name": "Ada"}', '{"name": "Ada", "age": -1}', '{"name": 1, "age": 2}', "[]"])
def test_json_schema_rejects_documents_breaking_the_schema(response: str) -> None:
    assert verify(task("", "json_schema", schema=SCHEMA), response) == 0.0


@pytest.mark.parametrize("response", ["", "{name: Ada}", '{"name": "Ada", "age": 36', "not json", "[" * 100_000])
def test_json_schema_scores_invalid_json_zero(response: str) -> None:
    assert verify(task("", "json_schema", schema=SCHEMA), response) == 0.0


def test_json_schema_missing_or_invalid_schema_is_a_data_error() -> None:
    with pytest.raises(ValueError, match="needs metadata"):
        verify(task("", "json_schema"), "{}")
    with pytest.raises(ValueError, match="invalid JSON schema"):
        verify(task("", "json_schema", schema={"type": 12}), "{}")


# --------------------------------------------------------------------------- regex

DATE = r"\d{4}-\d{2}-\d{2}"


@pytest.mark.parametrize("response", ["2024-01-31", "  2024-01-31\n", "I think <answer>2024-01-31</answer>"])
def test_regex_accepts_full_matches(response: str) -> None:
    assert verify(task("", "regex", pattern=DATE), response) == 1.0


@pytest.mark.parametrize("response", ["2024-01-31 or so", "on 2024-01-31", "", "31/01/2024", "<answer>2024-1-31</answer>"])
def test_regex_rejects_partial_and_malformed_answers(response: str) -> None:
    assert verify(task("", "regex", pattern=DATE), response) == 0.0


def test_regex_missing_or_invalid_pattern_is_a_data_error() -> None:
    with pytest.raises(ValueError, match="needs metadata"):
        verify(task("", "regex"), "x")
    with pytest.raises(ValueError, match="invalid regex"):
        verify(task("", "regex", pattern="(unclosed"), "x")
