"""The `math` verifier: symbolic equality by math-verify, with relations judged as relations.

math-verify is built to pull the last expression out of free text, so on its own it scores a
relation by its right-hand side: for the reference `3` it accepts `x \\neq 3`, `x < 3`, `\\pm 3`,
`5 = 3` and `x=5, y=3`. Here the extracted answer is parsed as one LaTeX expression (wrapped in
`$...$`) so that the relation survives the parse, and then:

- a reference `name = value` (`x = 3`, `y = 2x+1`) is its value, as an answer is; a reference that
  is another relation (`x \\leq 3`, `\\pm 3`) is compared with the answer by math-verify as is;
- otherwise an answer that is an inequality, `\\neq`, `\\pm`, `\\approx`, `\\to` (and the like) or a
  list of equations scores 0; an equation or chain of equations (`x = 3`, `x = 1+2 = 3`) scores 1
  only when every side that is not a bare name (`x`, `x_1`, `f(x)`) equals the reference, so
  `x = 3` and `3 = x` keep 1 while `5 = 3` and `x = 5 = 3` get 0.
- An answer that reads as prose (a word of 3+ letters outside LaTeX commands, typically
  a response that states its answer in neither `<answer>` tags nor `\\boxed{}`) is left to
  math-verify's free-text extraction, and scores 0 when it writes any relation sign at all.
"""

from __future__ import annotations

import functools
import re

from reinforge.tasks.answer_extraction import boxed_spans, task_answer
from reinforge.tasks.task import Task

# Signs that make a statement about the value rather than state it; `=` is handled apart.
_RELATION = re.compile(
    r"\\(?:neq?|n?leq?|n?geq?|leqslant|geqslant|lt|gt|ll|gg|pm|mp|approx|sim|simeq|cong|equiv|propto"
    r"|to|rightarrow|Rightarrow|longrightarrow|implies|iff|mapsto|subset|subseteq|supset|supseteq|notin)(?![a-zA-Z])"
    r"|[<>≠≤≥±∓≈≅≡→⇒]|!="
)
_EQUALS = re.compile(r"(?<![<>!:\\])=")
_PROSE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{3,}")
_TEXT_COMMAND = re.compile(r"\\(?:text|mathrm|textbf|mbox|operatorname)\s*\{[^{}]*\}")


def _parse(text: str, wrap: bool) -> list:
    """math-verify's parse; `parsing_timeout=None`: its own timeout uses SIGALRM, which fails
    outside the main thread; the RewardScorer's per-call timeout covers these calls instead."""
    from math_verify import parse  # imported here: it pulls in sympy, which most runs never need

    text = text.strip()
    wrapped = f"${text}$" if text and "$" not in text else None
    # Wrapped first for an expression (the relation survives); as free text first for prose.
    for candidate in (wrapped, text) if wrap else (text, wrapped):
        parsed = parse(candidate, parsing_timeout=None) if candidate else []
        if parsed:
            return parsed
    return []


def _is_prose(text: str) -> bool:
    """A word of 3+ letters outside LaTeX commands and `\\text{}`: "18 dollars", "sin(x)"."""
    return _PROSE.search(_TEXT_COMMAND.sub(" ", text)) is not None


@functools.lru_cache(maxsize=4096)
def _gold(answer: str) -> list:
    """The reference parsed; `x = 3` (a name, then the value) is the value 3, as in an answer."""
    parsed = _parse(answer, wrap=not _is_prose(answer))
    sides = _equation_sides(parsed[0]) if parsed else None
    if sides is not None and len(sides) == 2 and _is_name(sides[0]) and not _is_name(sides[1]):
        return [sides[1], parsed[1]]
    return parsed


def _is_relation(expr) -> bool:
    from sympy import And, Or
    from sympy.core.relational import Relational
    from sympy.logic.boolalg import BooleanAtom
    from sympy.sets import FiniteSet

    if isinstance(expr, (Relational, And, Or, BooleanAtom)):
        return True
    return isinstance(expr, FiniteSet) and any(_is_relation(arg) for arg in expr.args)


def _is_name(expr) -> bool:
    from sympy import Symbol
    from sympy.core.function import AppliedUndef

    return isinstance(expr, (Symbol, AppliedUndef))


def _equation_sides(expr) -> list | None:
    """The sides of an equation or a chain of equations (`x = 1+2 = 3` parses to an And of Eqs);
    None for anything else (an inequality, `\\neq`, a list of equations)."""
    from sympy import And, Eq

    relations = expr.args if isinstance(expr, And) else (expr,)
    if not relations or not all(isinstance(rel, Eq) for rel in relations):
        return None
    return [side for rel in relations for side in (rel.lhs, rel.rhs)]


def math_equal(task: Task, response: str) -> float:
    """Symbolic equality by math-verify: LaTeX, fractions, `\\boxed{}`, expressions (x^2+2x+1 ==
    (x+1)^2), sets and intervals; relations as the module docstring says. The answer is the
    task's extracted answer (with the default extractor the `<answer>` content, else the whole
    response), or the last `\\boxed{}` in it."""
    from math_verify import verify as math_verify

    gold = _gold(task.answer)
    if not gold:
        raise ValueError(f"task {task.id!r}: reference answer {task.answer!r} is not parseable math (verifier 'math')")
    answer = task_answer(task, response)
    if answer is None:
        return 0.0
    spans = boxed_spans(answer)
    span = spans[-1][2] if spans else answer
    if not span.strip():
        return 0.0
    gold_is_relation = _is_relation(gold[0]) or bool(_RELATION.search(task.answer))
    # Checked on the text: `\\approx` and `\\to` parse away to their right-hand side.
    if not gold_is_relation and _RELATION.search(span):
        return 0.0
    prose = _is_prose(span)
    if prose and not gold_is_relation and _EQUALS.search(span):
        return 0.0
    predicted = _parse(span, wrap=not prose)
    if not predicted:
        return 0.0
    if gold_is_relation:
        return 1.0 if math_verify(gold, predicted, timeout_seconds=None) else 0.0
    value = predicted[0]
    if not _is_relation(value):
        return 1.0 if math_verify(gold, predicted, timeout_seconds=None) else 0.0
    sides = _equation_sides(value)
    if sides is None:
        return 0.0
    values = [side for side in sides if not _is_name(side)]
    if not values:
        return 0.0
    return 1.0 if all(math_verify(gold, [side], timeout_seconds=None) for side in values) else 0.0
