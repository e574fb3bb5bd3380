"""Majority, best-of-n and weighted voting by a value model, by hand."""

from __future__ import annotations

import pytest

from reinforge.evals.value_voting import best_of_n_solved, majority_solved, voting_metrics, weighted_vote_solved


def test_three_rules_on_one_task_by_hand() -> None:
    responses = ["12", "13 ", "12", "13", "7"]
    correct = [False, True, False, True, False]
    values = [0.1, 0.3, 0.2, 0.35, 0.9]
    # majority: "12" and "13" both twice, "12" met first -> wrong
    assert not majority_solved(responses, correct)
    # best-of-n: the highest value is "7" (0.9) -> wrong
    assert not best_of_n_solved(responses, correct, values)
    # weighted: 12 -> 0.3, 13 -> 0.65, 7 -> 0.9 -> wrong; with 7's value at 0.5, 13 wins -> right
    assert not weighted_vote_solved(responses, correct, values)
    assert weighted_vote_solved(responses, correct, [0.1, 0.3, 0.2, 0.35, 0.5])


def test_voting_metrics_over_records() -> None:
    records = [
        {"samples": ["1", "1", "2"], "sample_correct": [True, True, False], "sample_values": [0.2, 0.2, 0.9]},
        {"samples": ["5", "6", "6"], "sample_correct": [True, False, False], "sample_values": [0.9, 0.1, 0.1]},
    ]
    # task 1: majority right, best wrong (0.9 on "2"), vote 1 -> 0.4 < 2 -> 0.9 wrong
    # task 2: majority wrong, best right, vote 5 -> 0.9 > 6 -> 0.2 right
    assert voting_metrics(records) == pytest.approx({"majority@3": 0.5, "value_best@3": 0.5, "value_vote@3": 0.5})
    assert voting_metrics([{"samples": ["1"], "sample_correct": [True]}]) == {}
