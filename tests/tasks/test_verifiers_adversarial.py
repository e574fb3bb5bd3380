"""Wrong answers that verifiers used to reward (issue 31), next to the right answers that must keep 1.

One table per verifier: each WRONG row must score 0 and each RIGHT row 1. Every row of a WRONG table
is a wrong answer to the same reference, so a verifier that rewards any of them is reward-hackable.
"""

from __future__ import annotations

import pytest

from reinforge.tasks.answer_extraction import extract_answer
from reinforge.tasks.verifiers import strict_json, verify
from reinforge.tasks.task import Task


def task(answer: str, verifier: str, extractor: str = "response", **metadata) -> Task:
    return Task(id="t", prompt="?", answer=answer, verifier=verifier, metadata=metadata, answer_extractor=extractor)


def tagged(answer: str) -> str:
    return f"reasoning...\n<answer>{answer}</answer>"


# --------------------------------------------------------------------------- math (reference 3)

MATH_WRONG = [
    r"x \neq 3", "x < 3", "x > 3", r"x \leq 3", r"x \geq 3", r"\pm 3", "5 = 3", "x = 5 = 3", "x=5, y=3",
    r"x \ne 3", "x != 3", r"3 \le x", r"x \approx 3", r"x \to 3", r"\mp 3", "3, 5", "3 or 5", "3 = 5",
    "x=3, y=5", "y = x", r"2\pi", "(1, 3]", "-3", r"\boxed{x < 3}", "x≠3", "x≤3",
]
MATH_RIGHT = ["3", "x = 3", r"\boxed{3}", "3.0", "3 = x", "x = 1+2 = 3", "f(x) = 3", r"\frac{6}{2}", r"\sqrt{9}", "$3$", "x_1 = 3"]


@pytest.mark.parametrize("answer", MATH_WRONG)
def test_math_scores_relations_and_wrong_values_zero(answer: str) -> None:
    assert verify(task("3", "math"), tagged(answer)) == 0.0


@pytest.mark.parametrize("answer", MATH_RIGHT)
def test_math_keeps_right_answers(answer: str) -> None:
    # A bare `x = 3` (a name, one `=`, the value) states the value: it keeps 1.
    assert verify(task("3", "math"), tagged(answer)) == 1.0


@pytest.mark.parametrize(
    ("gold", "answer", "score"),
    [
        (r"x \leq 3", r"x \le 3", 1.0),  # a relation reference is compared as a relation
        (r"x \leq 3", r"3 \geq x", 1.0),
        (r"x \leq 3", "x < 3", 0.0),
        (r"x \leq 3", "3", 0.0),
        (r"\pm 3", r"\pm 3", 1.0),
        (r"\pm 3", "3", 0.0),
        ("(1, 2]", "(1,2]", 1.0),  # the reference is parsed whole, not as its last number
        ("(1, 2]", "2", 0.0),
        ("x = 3", "3", 1.0),  # a reference `x = 3` is the value 3, as an answer `x = 3` is
        ("x = 3", "x = 3", 1.0),
        ("x = 3", "5 = 3", 0.0),
        ("x = 3", "x < 3", 0.0),
        ("y = 2x+1", "y = 1+2x", 1.0),
        ("y = 2x+1", "y = 2x", 0.0),
        ("18 dollars", "18", 1.0),  # a worded reference is read as text, not as 18*d*o*l*l*a*r*s
    ],
)
def test_math_relation_and_interval_references(gold: str, answer: str, score: float) -> None:
    assert verify(task(gold, "math"), tagged(answer)) == score


@pytest.mark.parametrize(
    ("response", "score"),
    [
        (r"So the answer is \boxed{3}.", 1.0),
        ("The answer is 3", 1.0),
        (r"Since x \neq 3 fails, \boxed{3}", 1.0),  # only the boxed answer is judged
        ("The answer is x < 3", 0.0),  # prose: any relation sign scores 0
        ("Thus x = 5 = 3", 0.0),
    ],
)
def test_math_in_untagged_responses(response: str, score: float) -> None:
    assert verify(task("3", "math"), response) == score


# --------------------------------------------------------------------------- numeric

NUMERIC_WRONG = [
    ("1000000", "1000001"),
    ("1000000", "1,000,001"),
    ("123456789", "123456800"),
    ("123456789", "1.234568e8"),
    ("12345678901234567890", "12345678901234567891"),  # past 2**53: floats would round these together
    ("3", "3.0000001"),
    ("0", "1e-15"),
    ("3", "x < 3"),
    ("3", r"x \neq 3"),
    ("3", r"\pm 3"),
    ("3", r"x \approx 3"),
    ("3", "5 = 3"),
    ("3", "x = 5 = 3"),
    ("3", "x=5, y=3"),
    ("3", "3 or 5"),
    ("3", "between 2 and 3"),
    ("3", "1e-400"),
    ("3", "NaN"),
    ("46", "<answer>3<answer>46</answer></answer>"),  # nested tags: no one answer
]
NUMERIC_RIGHT = [
    ("1000000", "1000000"),
    ("1000000", "1e6"),
    ("1000000", "1,000,000"),
    ("12345678901234567890", "12345678901234567890"),
    ("3", "3.0"),
    ("3", "x = 3"),
    ("3", "$3$"),
    ("3", "3 apples"),
    ("46", "12+34=46"),
    ("0.5", r"\frac{1}{2}"),
    ("0.333333", "1/3"),  # a non-integer reference keeps the relative tolerance 1e-6
]


@pytest.mark.parametrize(("gold", "answer"), NUMERIC_WRONG)
def test_numeric_wrong_answers_score_zero(gold: str, answer: str) -> None:
    response = answer if answer.startswith("<answer>") else tagged(answer)
    assert verify(task(gold, "numeric", "answer_tags"), response) == 0.0


@pytest.mark.parametrize(("gold", "answer"), NUMERIC_RIGHT)
def test_numeric_right_answers_score_one(gold: str, answer: str) -> None:
    assert verify(task(gold, "numeric", "answer_tags"), tagged(answer)) == 1.0


def test_numeric_tolerance_is_the_tasks_choice() -> None:
    assert verify(task("1000000", "numeric", rel_tol=1e-5), "1000001") == 1.0
    assert verify(task("0", "numeric", abs_tol=1e-12), "1e-15") == 1.0
    assert verify(task("0.5", "numeric", rel_tol=0.0), "0.5000001") == 0.0  # no tolerance asked: exact
    assert verify(task("0.5", "numeric"), "0.5000001") == 1.0  # default for a non-integer reference
    for bad in ("big", -1e-3, 1.5, float("nan"), True):
        with pytest.raises(ValueError, match="rel_tol"):
            verify(task("3", "numeric", rel_tol=bad), "3")


# --------------------------------------------------------------------------- json_schema

SCHEMA = {
    "type": "object",
    "properties": {
        "age": {"type": "number", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "born": {"type": "string", "format": "date"},
    },
    "required": ["age"],
}
JSON_WRONG = [
    '{"age": NaN}',
    '{"age": Infinity}',
    '{"age": -Infinity}',
    '{"age": 1e999}',  # overflows to inf in Python's parser
    '{"age": -5, "age": 30}',  # duplicate keys: the invalid first value would hide behind the last
    '{"age": 30, "x": {"a": 1, "a": 2}}',
    '{"age": 30, "email": "nope"}',
    '{"age": 30, "email": "a@"}',
    '{"age": 30, "email": "@"}',
    '{"age": 30, "born": "2024-13-01"}',
    '{"age": 30, "born": "2024-02-30"}',
    '{"age": 30, "born": "yesterday"}',
    '{"age": 30} {"age": 1}',
    '{"age": true}',
    '{"age": 151}',
]
JSON_RIGHT = [
    '{"age": 30}',
    '{"age": 0}',
    '{"age": 1.5e2}',
    '{"age": 30, "email": "ada@example.com", "born": "1815-12-10"}',
    '```json\n{"age": 36}\n```',
]


@pytest.mark.parametrize("answer", JSON_WRONG)
def test_json_schema_wrong_answers_score_zero(answer: str) -> None:
    assert verify(task("", "json_schema", schema=SCHEMA), answer) == 0.0


@pytest.mark.parametrize("answer", JSON_RIGHT)
def test_json_schema_right_answers_score_one(answer: str) -> None:
    assert verify(task("", "json_schema", schema=SCHEMA), answer) == 1.0


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", "1e400", '{"a": 1, "a": 1}'])
def test_strict_json_refuses_what_json_does_not_allow(text: str) -> None:
    with pytest.raises(ValueError):
        strict_json(text)


# --------------------------------------------------------------------------- exact (reference Straße / Paris)

EXACT_WRONG = [
    ("Straße", "STRASSE"),  # casefold() would make ß equal to ss
    ("Straße", "strasse"),
    ("Maße", "Masse"),  # dimensions, not mass
    ("Paris", "Paris."),
    ("Paris", "Pari s"),
    ("Paris", "<answer>Lyon<answer>Paris</answer></answer>"),  # nested tags: no one answer
    ("Paris", "<answer>Paris</answer></answer>"),
    ("Paris", "Paris\nLyon"),
    ("Paris", "<answer>Paris or Lyon</answer>"),
    ("Paris", "Parıs"),  # dotless ı
    ("Paris", "<answer></answer>Paris"),
    ("x2", "x²"),  # no compatibility folding: x² is not x2
]
EXACT_RIGHT = [
    ("Straße", "straße"),
    ("Straße", "STRAßE"),
    ("Paris", "paris"),
    ("Paris", "<answer> PARIS </answer>"),
    ("New York", "new \n york"),
    ("café", "cafe\u0301"),  # decomposed é is the same letter (NFC)
    ("Paris", "<answer>Lyon</answer> no, <answer>Paris</answer>"),
]


@pytest.mark.parametrize(("gold", "response"), EXACT_WRONG)
def test_exact_wrong_answers_score_zero(gold: str, response: str) -> None:
    assert verify(task(gold, "exact"), response) == 0.0


@pytest.mark.parametrize(("gold", "response"), EXACT_RIGHT)
def test_exact_right_answers_score_one(gold: str, response: str) -> None:
    assert verify(task(gold, "exact"), response) == 1.0


@pytest.mark.parametrize("response", ["<answer>3<answer>5</answer></answer>", "<answer>5</answer></answer>"])
def test_nested_answer_tags_are_no_answer(response: str) -> None:
    assert extract_answer(response, "answer_tags") is None


# --------------------------------------------------------------------------- regex

REGEX_CASES = {
    "answer: .*": (
        ["answer: 5\nno wait, 7", "answer: 5\n7", "answer:5", "Answer: 5", "<answer>answer: 5\nor 7</answer>",
         "x answer: 5", "<answer>a<answer>answer: 5</answer></answer>"],
        ["answer: 5", "answer: 5 because", "<answer>answer: 5</answer>"],
    ),
    r"\d{4}-\d{2}-\d{2}": (
        ["2024-01-01\n2025-01-01", "2024-01-01x", "on 2024-01-01", "2024-1-01", "24-01-01"],
        ["2024-01-01", " 2024-01-01 \n"],
    ),
}


@pytest.mark.parametrize(
    ("pattern", "answer"), [(pattern, wrong) for pattern, (wrongs, _) in REGEX_CASES.items() for wrong in wrongs]
)
def test_regex_wrong_answers_score_zero(pattern: str, answer: str) -> None:
    assert verify(task("", "regex", pattern=pattern), answer) == 0.0


@pytest.mark.parametrize(
    ("pattern", "answer"), [(pattern, right) for pattern, (_, rights) in REGEX_CASES.items() for right in rights]
)
def test_regex_right_answers_score_one(pattern: str, answer: str) -> None:
    assert verify(task("", "regex", pattern=pattern), answer) == 1.0


def test_regex_dotall_is_the_patterns_choice() -> None:
    assert verify(task("", "regex", pattern="(?s)answer: .*"), "answer: 5\nbecause") == 1.0
