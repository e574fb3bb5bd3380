"""Answer extraction: where in a response its final answer is, the way real models write it.

A task names its extractor in `Task.answer_extractor` (config: `task.answer_extractor`); the
verifiers check the extracted answer, so the format a model uses to state it is not a condition of
being right (`answer_format` scores the strict format as a reward of its own: strict_form below).

- `response`: the content of the last complete `<answer>...</answer>`, else the whole response
  (what a model trained on bare answers writes: "12+34=" -> "46"). Never "no answer" unless empty.
- `answer_tags`: the content of the last complete `<answer>...</answer>`.
- `boxed`: the content of the last complete `\\boxed{...}` (nested braces kept: `\\boxed{\\frac{1}{2}}`
  gives `\\frac{1}{2}`), or `\\fbox{...}`.
- `gsm8k`: what follows the last `####` on its line (GSM8K's "#### 72").
- `last_number`: the last number written (`-3`, `2.5`, `1,234` -> `1234`, `3/4`); a minus counts as a
  sign only where it cannot be subtraction ("10-7" ends with 7, "is -7" with -7).
- `auto`: answer tags, else the last boxed, else `####`, else for a task whose reference answer is
  a number the last number, else the whole response.

Every extractor but `response` returns None when the response has no answer in its form, which
evaluation counts apart from wrong answers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from fractions import Fraction

from reinforge.tasks.task import ANSWER_EXTRACTORS, Task

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
GSM8K_MARK = "####"
BOXED_COMMANDS = ("\\boxed", "\\fbox")

_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?$")
# A number: 1,234.5 | 12.5 | 3/4 | 7, with a sign only where a minus cannot be subtraction (not
# right after a digit, letter, closing bracket or operand-like character).
_NUMBER = re.compile(
    r"(?:(?<![\w)\]}.])-)?"
    r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|\d+/\d+(?![\d/])|\d+(?:\.\d+)?)"
)


def _tags(response: str) -> str | None:
    """Searching backwards from the last closing tag means earlier drafts ("<answer>5</answer> no,
    wait ... <answer>7</answer>") and stray opening tags do not leak into the answer. Nested tags
    ("<answer>3<answer>5</answer></answer>") state no one answer: the content would hold a tag
    ("5</answer>"), and that is no answer at all rather than a number or a pattern's match."""
    end = response.rfind(ANSWER_CLOSE)
    start = response.rfind(ANSWER_OPEN, 0, end) if end >= 0 else -1
    if start < 0:
        return None
    content = response[start + len(ANSWER_OPEN) : end]
    if ANSWER_CLOSE in content or ANSWER_OPEN in content:
        return None
    return content.strip()


def _balanced(text: str, open_at: int) -> int | None:
    """Index just past the `}` matching the `{` at `open_at`, or None when it is never closed."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def boxed_spans(response: str) -> list[tuple[int, int, str]]:
    """(start, end, content) of every complete `\\boxed{...}` / `\\fbox{...}`, in order. An unclosed
    one (a response cut off mid-answer) is skipped."""
    spans = []
    for match in re.finditer("|".join(re.escape(c) for c in BOXED_COMMANDS), response):
        brace = match.end()
        while brace < len(response) and response[brace] == " ":
            brace += 1
        if brace >= len(response) or response[brace] != "{":
            continue
        end = _balanced(response, brace)
        if end is not None:
            spans.append((match.start(), end, response[brace + 1 : end - 1].strip()))
    return spans


def _boxed(response: str) -> str | None:
    spans = boxed_spans(response)
    return spans[-1][2] if spans else None


def _gsm8k(response: str) -> str | None:
    at = response.rfind(GSM8K_MARK)
    if at < 0:
        return None
    return response[at + len(GSM8K_MARK) :].lstrip("# \t").split("\n", 1)[0].strip()


def number_matches(text: str) -> list[re.Match[str]]:
    return list(_NUMBER.finditer(text))


def _last_number(response: str) -> str | None:
    matches = number_matches(response)
    return matches[-1].group(0).replace(",", "") if matches else None


def _nonempty(text: str | None) -> str | None:
    return text if text else None


def extract_answer(response: str, extractor: str = "response", numeric: bool = False) -> str | None:
    """The final answer of `response` by `extractor` (module docstring), stripped; None when there
    is none in that form. `numeric`: the task's reference answer is a number (only `auto` uses it)."""
    if extractor == "response":
        tagged = _tags(response)
        return tagged if tagged is not None else response.strip()
    if extractor == "auto":
        for found in (_tags(response), _boxed(response), _gsm8k(response)):
            if found:
                return found
        return _last_number(response) if numeric else _nonempty(response.strip())
    try:
        extract = EXTRACTORS[extractor]
    except KeyError:
        raise ValueError(f"unknown answer extractor {extractor!r}; valid: {', '.join(ANSWER_EXTRACTORS)}") from None
    return _nonempty(extract(response))


EXTRACTORS: dict[str, Callable[[str], str | None]] = {
    "answer_tags": _tags,
    "boxed": _boxed,
    "gsm8k": _gsm8k,
    "last_number": _last_number,
}


_EXPONENT = re.compile(r"[eE][+-]?(\d+)")


def parse_fraction(text: str) -> Fraction | None:
    """The exact value of a number written as an integer, decimal, scientific, `a/b` fraction or
    `1,234`, as a Fraction (so 1000001 and 1000000, or integers past 2**53, never round together).

    Returns None for anything else (nan, inf, and exponents past 400, which as floats would be inf
    or 0), so a malformed answer scores 0 instead of raising.
    """
    text = text.strip()
    if _THOUSANDS.match(text):
        text = text.replace(",", "")
    exponent = _EXPONENT.search(text)
    if exponent is not None and (len(exponent.group(1)) > 3 or int(exponent.group(1)) > 400):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def parse_number(text: str) -> float | None:
    """parse_fraction as a finite float, or None."""
    value = parse_fraction(text)
    if value is None:
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def numeric_reference(task: Task) -> bool:
    return parse_number(task.answer) is not None


def task_answer(task: Task, response: str) -> str | None:
    """The answer of `response` by the extractor its task names."""
    return extract_answer(response, task.answer_extractor, numeric=numeric_reference(task))


_LATEX_FRACTION = re.compile(r"\\[dt]?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(-?\d+)\s*\}")


# In a lenient answer, signs that make it a statement about a number rather than the number:
# "x < 5", "x \\neq 5", "\\pm 5", "\\approx 5" state no single value and score 0.
_RELATION_SIGN = re.compile(
    r"\\(?:neq?|n?leq?|n?geq?|leqslant|geqslant|lt|gt|pm|mp|approx|sim|simeq|to|rightarrow)(?![a-zA-Z])|[<>≠≤≥±∓≈~]|!="
)
_EQUALS = re.compile(r"(?<![<>!:\\])=")
_STATEMENT_BREAK = re.compile(r"[,;]\s*\D")  # "x=5, y=3": two statements, not a thousands comma


def answer_fraction(answer: str, lenient: bool) -> Fraction | None:
    """The exact number an extracted answer states. Strict (`lenient=False`): the whole answer must
    be a number. Lenient: dollar signs, `\\frac{a}{b}` and words around it are allowed ("$18",
    "x = 5", "18 apples", "12+34=46"), provided it states one number: the part after the last `=`
    holds exactly one number, no earlier side is a different bare number ("5 = 3", "x = 5 = 3"),
    there is no second statement ("x=5, y=3") and no relation sign ("x < 5", "\\pm 5")."""
    value = parse_fraction(answer)
    if value is not None or not lenient:
        return value
    cleaned = _LATEX_FRACTION.sub(r"\1/\2", answer).replace("\\$", "").replace("$", "").replace("\\!", "")
    value = parse_fraction(cleaned)
    if value is not None:
        return value
    if _RELATION_SIGN.search(cleaned):
        return None
    *earlier, last = _EQUALS.split(cleaned)
    numbers = number_matches(last)
    if len(numbers) != 1:
        return None
    value = parse_fraction(numbers[0].group(0).replace(",", ""))
    for side in earlier:
        if _STATEMENT_BREAK.search(side):
            return None
        bare = parse_fraction(side)
        if bare is not None and bare != value:
            return None
    return value


def answer_value(answer: str, lenient: bool) -> float | None:
    """answer_fraction as a float."""
    value = answer_fraction(answer, lenient)
    try:
        return None if value is None else float(value)
    except OverflowError:  # a 400-digit integer
        return None


# --------------------------------------------------------------------------- the strict format

_AFTER_BOXED = re.compile(r"[\s$.\\\])}*]*")  # closing math delimiters, a full stop, markdown bold
_AFTER_NUMBER = re.compile(r"[\s.!*$%)\]}]*")


def strict_form(response: str, extractor: str, numeric: bool = False) -> bool:
    """Whether `response` states its final answer in the strict form of `extractor`, as the last
    thing it writes: `<answer>X</answer>` then nothing; `\\boxed{X}` then at most closing math
    delimiters or a full stop; a last line `#### X`; a number then at most a full stop (last_number).
    `auto` accepts any of these forms (the number only for numeric tasks); `response` asks that the
    whole response be the answer (a number, for numeric tasks)."""
    text = response.rstrip()
    if extractor == "answer_tags":
        return text.endswith(ANSWER_CLOSE) and bool(_tags(text))
    if extractor == "boxed":
        spans = boxed_spans(text)
        return bool(spans) and bool(spans[-1][2]) and _AFTER_BOXED.fullmatch(text[spans[-1][1]:]) is not None
    if extractor == "gsm8k":
        last_line = text.rsplit("\n", 1)[-1].strip()
        return last_line.startswith(GSM8K_MARK) and bool(_gsm8k(last_line))
    if extractor == "last_number":
        matches = number_matches(text)
        return bool(matches) and _AFTER_NUMBER.fullmatch(text[matches[-1].end():]) is not None
    if extractor == "auto":
        forms = ["answer_tags", "boxed", "gsm8k", *(["last_number"] if numeric else [])]
        return any(strict_form(response, form) for form in forms)
    if extractor == "response":
        answer = response.strip()
        return bool(answer) and (parse_number(answer) is not None if numeric else True)
    raise ValueError(f"unknown answer extractor {extractor!r}; valid: {', '.join(ANSWER_EXTRACTORS)}")
