"""Verifiers: does a response's final answer match the task's reference answer?

A verifier is a plain function `(task, response) -> float` registered by name in `VERIFIERS`;
a task names its verifier in `Task.verifier`, so one run can mix tasks checked differently.
Each verifier receives the whole response and extracts the answer itself, so a verifier that
cares about the rest of the text (format, reasoning) can be added without changing this file.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Any, Callable

from reinforge.tasks.task import Task

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"

# Tolerances of the numeric verifier: relative, plus a tiny absolute one so that a reference of
# exactly 0 still accepts float noise such as 1e-17.
NUMERIC_REL_TOL = 1e-6
NUMERIC_ABS_TOL = 1e-12

_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?$")


class UnknownVerifierError(KeyError):
    """A task names a verifier that is not registered."""

    def __str__(self) -> str:  # KeyError would otherwise print the message in quotes
        return str(self.args[0])


def extract_answer(response: str) -> str:
    """The content of the last complete `<answer>...</answer>`, else the whole stripped response.

    Searching backwards from the last closing tag means earlier drafts ("<answer>5</answer> no,
    wait ... <answer>7</answer>") and stray opening tags do not leak into the answer.
    """
    end = response.rfind(ANSWER_CLOSE)
    start = response.rfind(ANSWER_OPEN, 0, end) if end >= 0 else -1
    if start < 0:
        return response.strip()
    return response[start + len(ANSWER_OPEN) : end].strip()


def normalize(text: str) -> str:
    """Case and whitespace are not part of an answer's meaning for exact matching."""
    return " ".join(text.split()).casefold()


def parse_number(text: str) -> float | None:
    """A finite number written as an integer, decimal, scientific, `a/b` fraction or `1,234`.

    Returns None for anything else (including nan and inf), so a malformed answer scores 0
    instead of raising.
    """
    text = text.strip()
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    try:
        value = float(text)
    except ValueError:
        try:
            value = float(Fraction(text))
        except (ValueError, ZeroDivisionError, OverflowError):
            return None
    return value if math.isfinite(value) else None


def exact(task: Task, response: str) -> float:
    return 1.0 if normalize(extract_answer(response)) == normalize(task.answer) else 0.0


def numeric(task: Task, response: str) -> float:
    reference = parse_number(task.answer)
    if reference is None:
        # A bad reference is a data bug, not a bad sample: say so instead of scoring 0 forever.
        raise ValueError(f"task {task.id!r}: reference answer {task.answer!r} is not a number (verifier 'numeric')")
    value = parse_number(extract_answer(response))
    if value is None:
        return 0.0
    return 1.0 if math.isclose(value, reference, rel_tol=NUMERIC_REL_TOL, abs_tol=NUMERIC_ABS_TOL) else 0.0


@functools.lru_cache(maxsize=None)
def _reasoning_gym_scorer(dataset: str) -> Callable[[str, dict[str, Any]], float]:
    # Imported here: reasoning-gym takes seconds to import and most runs never need it.
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(dataset)


def reasoning_gym_score(task: Task, response: str) -> float:
    """Delegates to the dataset's own scorer, which needs the full generated entry."""
    dataset, entry = task.metadata.get("dataset"), task.metadata.get("entry")
    if dataset is None or entry is None:
        raise ValueError(f"task {task.id!r}: verifier 'reasoning_gym' needs metadata['dataset'] and metadata['entry']")
    return float(_reasoning_gym_scorer(dataset)(extract_answer(response), entry))


VERIFIERS: dict[str, Callable[[Task, str], float]] = {
    "exact": exact,
    "numeric": numeric,
    "reasoning_gym": reasoning_gym_score,
}


def get_verifier(name: str) -> Callable[[Task, str], float]:
    try:
        return VERIFIERS[name]
    except KeyError:
        raise UnknownVerifierError(f"unknown verifier {name!r}; valid: {', '.join(sorted(VERIFIERS))}") from None


def verify(task: Task, response: str) -> float:
    """Score one response with the verifier its task names."""
    return get_verifier(task.verifier)(task, response)
