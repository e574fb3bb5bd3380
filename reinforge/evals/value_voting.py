"""Choosing one answer from n samples: majority voting, and best-of-n / weighted voting by a value model.

For a task with sampled responses y_1..y_n, their answers a(y_j) (the response text, stripped) and
value scores v_j (the success head's p(success | whole response), reinforge.models.success_head):

    majority:      a* = argmax_a  #{j : a(y_j) = a}                  (self-consistency, Wang et al. 2023)
    best-of-n:     a* = a(y_{argmax_j v_j})                           (verifier-ranked, Cobbe et al. 2021)
    weighted vote: a* = argmax_a  sum_{j : a(y_j) = a} v_j           (ARRoL's test-time weighting, arXiv:2603.24840)

Ties go to the answer met first. A task counts as solved when a* is the answer of a sample judged
correct. Metrics over tasks: `majority@n`, `value_best@n`, `value_vote@n`, beside mean@n / pass@n.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def answer_key(response: str) -> str:
    return response.strip()


def _solved(answers: list[str], correct: Sequence[bool], chosen: str) -> bool:
    return any(bool(c) for a, c in zip(answers, correct) if a == chosen)


def _argmax_answer(answers: list[str], weights: Sequence[float]) -> str:
    totals: dict[str, float] = {}
    for answer, weight in zip(answers, weights):
        totals[answer] = totals.get(answer, 0.0) + weight
    return max(totals, key=lambda a: (totals[a], -answers.index(a)))


def majority_solved(responses: Sequence[str], correct: Sequence[bool]) -> bool:
    answers = [answer_key(r) for r in responses]
    return _solved(answers, correct, _argmax_answer(answers, [1.0] * len(answers)))


def best_of_n_solved(responses: Sequence[str], correct: Sequence[bool], values: Sequence[float]) -> bool:
    best = max(range(len(values)), key=lambda j: (values[j], -j))
    return bool(correct[best])


def weighted_vote_solved(responses: Sequence[str], correct: Sequence[bool], values: Sequence[float]) -> bool:
    answers = [answer_key(r) for r in responses]
    return _solved(answers, correct, _argmax_answer(answers, values))


def voting_metrics(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """majority@n, value_best@n and value_vote@n over evaluation records that carry `samples`,
    `sample_correct` and `sample_values`; {} when there are none or fewer than 2 samples."""
    scored = [r for r in records if len(r.get("sample_values") or []) >= 2]
    if not scored:
        return {}
    n = len(scored[0]["samples"])
    rows = [(r["samples"], r["sample_correct"], r["sample_values"]) for r in scored]
    return {
        f"majority@{n}": sum(majority_solved(s, c) for s, c, _ in rows) / len(rows),
        f"value_best@{n}": sum(best_of_n_solved(s, c, v) for s, c, v in rows) / len(rows),
        f"value_vote@{n}": sum(weighted_vote_solved(s, c, v) for s, c, v in rows) / len(rows),
    }
