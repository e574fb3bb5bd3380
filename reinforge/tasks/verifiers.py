"""Verifiers: does a response's final answer match the task's reference answer?

A verifier is a plain function `(task, response) -> float` registered by name in `VERIFIERS`;
a task names its verifier in `Task.verifier`, so one run can mix tasks checked differently.
Each verifier receives the whole response and extracts the answer itself, with the extractor the
task names (`Task.answer_extractor`, reinforge.tasks.answer_extraction): correctness is judged
on the extracted answer, whatever format stated it; a response with no answer scores 0. A
verifier that cares about the rest of the text (format, reasoning) can be added without changing
this file.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from fractions import Fraction
from typing import Any, Callable

from reinforge.import_paths import ImportPathError, check_call, is_import_path, load_object
# extract_answer, parse_number and the tags are imported from here by other modules too.
from reinforge.tasks.answer_extraction import ANSWER_CLOSE, ANSWER_OPEN, answer_fraction, answer_value, extract_answer, parse_fraction, parse_number, task_answer  # noqa: F401
from reinforge.tasks.math_verifier import math_equal
from reinforge.tasks.task import Task

# The numeric verifier's default relative tolerance, for references that are not integers only
# (a decimal reference is often a rounding: 0.333333 for 1/3). An integer reference is matched
# exactly: 1000001 is not 1000000. A task chooses its own with metadata["rel_tol"] / ["abs_tol"].
NUMERIC_REL_TOL = Fraction(1, 1_000_000)  # exact: 0.333333 is within it of 1/3, on the boundary


class UnknownVerifierError(KeyError):
    """A task names a verifier that is not registered."""

    def __str__(self) -> str:  # KeyError would otherwise print the message in quotes
        return str(self.args[0])


def normalize(text: str) -> str:
    """Case and whitespace are not part of an answer's meaning for exact matching. NFC so that a
    composed and a decomposed "é" are one letter; `lower()`, not `casefold()`: case folding maps
    "ß" to "ss" and so makes different words equal (German "Maße", dimensions, and "Masse", mass)."""
    return unicodedata.normalize("NFC", " ".join(text.split())).lower()


def exact(task: Task, response: str) -> float:
    answer = task_answer(task, response)
    return 1.0 if answer is not None and normalize(answer) == normalize(task.answer) else 0.0


def _tolerances(task: Task, reference: Fraction) -> tuple[Fraction, Fraction]:
    """(relative, absolute) tolerance: the task's metadata["rel_tol"] / ["abs_tol"] when it sets
    either (a missing one is 0); else none for an integer reference, NUMERIC_REL_TOL otherwise."""
    chosen = {key: task.metadata[key] for key in ("rel_tol", "abs_tol") if key in task.metadata}
    if not chosen:
        return (Fraction(0) if reference.denominator == 1 else NUMERIC_REL_TOL), Fraction(0)
    for key, tol in chosen.items():
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or not 0 <= tol < 1:
            raise ValueError(f"task {task.id!r}: metadata[{key!r}] = {tol!r}; set a number in [0, 1) (verifier 'numeric')")
    return Fraction(chosen.get("rel_tol", 0)), Fraction(chosen.get("abs_tol", 0))


def numeric(task: Task, response: str) -> float:
    """The extracted answer's number equals the reference: exactly for an integer reference (as
    exact fractions, so no float rounding), within NUMERIC_REL_TOL for a non-integer one, or within
    the task's metadata["rel_tol"] / ["abs_tol"] when it sets them (math.isclose's rule). With
    answer_extractor=response the whole answer must be a number (the bare answers of the tiny
    recipes); with the others, words, `$` and `\\frac{a}{b}` around it are allowed ("#### $18",
    "<answer>x = 5</answer>") as long as it states one number: answer_extraction.answer_fraction."""
    reference = parse_fraction(task.answer)
    if reference is None:
        # A bad reference is a data bug, not a bad sample: say so instead of scoring 0 forever.
        raise ValueError(f"task {task.id!r}: reference answer {task.answer!r} is not a number (verifier 'numeric')")
    rel_tol, abs_tol = _tolerances(task, reference)
    answer = task_answer(task, response)
    value = None if answer is None else answer_fraction(answer, lenient=task.answer_extractor != "response")
    if value is None:
        return 0.0
    return 1.0 if abs(value - reference) <= max(rel_tol * max(abs(value), abs(reference)), abs_tol) else 0.0


@functools.lru_cache(maxsize=None)
def _reasoning_gym_scorer(dataset: str) -> Callable[[str, dict[str, Any]], float]:
    # Imported here: reasoning-gym takes seconds to import and most runs never need it.
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(dataset)


def reasoning_gym_score(task: Task, response: str) -> float:
    """Delegates to the dataset's own scorer (given the extracted answer), which needs the full
    generated entry. No extracted answer scores 0 without asking it."""
    dataset, entry = task.metadata.get("dataset"), task.metadata.get("entry")
    if dataset is None or entry is None:
        raise ValueError(f"task {task.id!r}: verifier 'reasoning_gym' needs metadata['dataset'] and metadata['entry']")
    answer = task_answer(task, response)
    if answer is None:
        return 0.0
    return float(_reasoning_gym_scorer(dataset)(answer, entry))


# --------------------------------------------------------------------------- math (math-verify)
# In its own module (relations judged as relations): reinforge.tasks.math_verifier.

# --------------------------------------------------------------------------- multiple choice

_CHOICE = re.compile(
    r"^(?:(?:the\s+)?(?:final\s+)?answer(?:\s+is)?\s*[:=]?\s*)?"  # optional "answer:" / "the answer is"
    r"(?:\(\s*([a-z])\s*\)|\[\s*([a-z])\s*\]|([a-z])\s*[).:]?)"  # B, (B), [B], B), B., B:
    r"\s*\.?$",
    re.IGNORECASE,
)


def parse_choice(text: str) -> str | None:
    """The option letter of "B", "(B)", "B)", "B.", "answer: B", "The answer is (b)"; else None."""
    match = _CHOICE.match(text.strip().replace("*", ""))  # markdown bold around the answer is common
    if match is None:
        return None
    return next(g for g in match.groups() if g).upper()


def multiple_choice(task: Task, response: str) -> float:
    """1 when the chosen option letter (A-Z, any case) is the task's answer letter."""
    reference = parse_choice(task.answer)
    if reference is None:
        raise ValueError(f"task {task.id!r}: reference answer {task.answer!r} is not an option letter A-Z (verifier 'multiple_choice')")
    answer = task_answer(task, response)
    return 1.0 if answer is not None and parse_choice(answer) == reference else 0.0


# --------------------------------------------------------------------------- JSON schema

_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n(.*?)\n?\s*```$", re.DOTALL)


# A plausible address: one @, no spaces, a dot in the domain (jsonschema's own check is only
# that "@" occurs, so "@" alone would pass).
_EMAIL = re.compile(r"[^@\s]+@[^@\s.]+(\.[^@\s.]+)+")


def _format_checker(cls: Any) -> Any:
    """The draft's format checker (date, time, ipv4, ipv6, uuid, regex, ... and whichever need
    optional packages and are installed), with a stricter email."""
    checker = type(cls.FORMAT_CHECKER)(formats=())
    checker.checkers = dict(cls.FORMAT_CHECKER.checkers)  # a copy: the draft's own is shared
    for name in ("email", "idn-email"):
        checker.checks(name)(lambda value: not isinstance(value, str) or _EMAIL.fullmatch(value) is not None)
    return checker


@functools.lru_cache(maxsize=256)
def _schema_validator(schema_json: str) -> Any:
    import jsonschema

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as err:
        raise ValueError(f"invalid JSON schema: {err.message}") from None
    return cls(schema, format_checker=_format_checker(cls))


class _NotJSON(ValueError):
    """Python's parser accepts what JSON does not (NaN, Infinity, 1e999 as inf) and lets the last of
    two equal keys win, which hides an invalid first value: all of these make the answer not JSON."""


def _no_constant(name: str) -> Any:
    raise _NotJSON(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJSON(f"{text} overflows a float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise _NotJSON("duplicate key")
    return result


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN, Infinity, numbers that overflow and duplicate keys (ValueError)."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys)


def json_schema(task: Task, response: str) -> float:
    """1 when the answer (a ```json fence is allowed around it) is strict JSON (strict_json) valid
    under the JSON schema in `task.metadata["schema"]`, `format` included (email, date, ...); 0
    when it is not JSON or breaks the schema."""
    schema = task.metadata.get("schema")
    if not isinstance(schema, (dict, bool)):
        raise ValueError(f"task {task.id!r}: verifier 'json_schema' needs metadata['schema'] (a JSON schema object)")
    try:
        validator = _schema_validator(json.dumps(schema, sort_keys=True))
    except ValueError as err:
        raise ValueError(f"task {task.id!r}: {err} (verifier 'json_schema')") from None
    text = task_answer(task, response)
    if text is None:
        return 0.0
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1)
    try:
        value = strict_json(text)
    except (ValueError, RecursionError):
        return 0.0
    return 1.0 if validator.is_valid(value) else 0.0


# --------------------------------------------------------------------------- regex


@functools.lru_cache(maxsize=1024)
def _compiled(pattern: str) -> re.Pattern[str]:
    # No DOTALL: under it `answer: .*` fully matches "answer: 5\nno wait, 7", whatever follows the
    # line the pattern was written for. A pattern that wants `.` to cross lines says `(?s)`.
    return re.compile(pattern)


def regex(task: Task, response: str) -> float:
    """1 when the answer (stripped) fully matches `task.metadata["pattern"]`. `.` does not match a
    newline unless the pattern opts in with `(?s)`."""
    pattern = task.metadata.get("pattern")
    if not isinstance(pattern, str):
        raise ValueError(f"task {task.id!r}: verifier 'regex' needs metadata['pattern'] (a regular expression)")
    try:
        compiled = _compiled(pattern)
    except re.error as err:
        raise ValueError(f"task {task.id!r}: invalid regex {pattern!r}: {err} (verifier 'regex')") from None
    answer = task_answer(task, response)
    return 1.0 if answer is not None and compiled.fullmatch(answer) else 0.0


VERIFIERS: dict[str, Callable[[Task, str], float]] = {
    "exact": exact,
    "numeric": numeric,
    "reasoning_gym": reasoning_gym_score,
    "math": math_equal,
    "multiple_choice": multiple_choice,
    "json_schema": json_schema,
    "regex": regex,
}


def get_verifier(name: str) -> Callable[[Task, str], float]:
    """A built-in verifier by name, or the user's `(task, response) -> float` by import path."""
    if is_import_path(name):

        try:
            fn = load_object(name)
            check_call(fn, (None, ""), {}, name, "a verifier is fn(task, response: str) -> float")
        except ImportPathError as err:
            raise UnknownVerifierError(f"verifier {err}") from None
        return fn
    try:
        return VERIFIERS[name]
    except KeyError:
        raise UnknownVerifierError(f"unknown verifier {name!r}; valid: {', '.join(sorted(VERIFIERS))}") from None


def verify(task: Task, response: str) -> float:
    """Score one response with the verifier its task names."""
    return get_verifier(task.verifier)(task, response)
