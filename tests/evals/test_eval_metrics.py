"""Evaluation statistics: pass@k by hand and by brute force, bootstrap CIs, per-family summaries."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from reinforge.evals.eval_metrics import bootstrap_ci, pass_at_k, per_task_scores, summarize


def test_pass_at_k_by_hand() -> None:
    # 4 samples, 1 correct, pick 2: C(3,2)/C(4,2) = 3/6 of the pairs miss it.
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 5, 1) == 1.0 and pass_at_k(5, 5, 5) == 1.0
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)  # pass@1 is the fraction correct
    assert pass_at_k(4, 2, 3) == 1.0  # only 2 wrong samples: every 3-subset holds a correct one


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_pass_at_k_matches_brute_force_over_subsets(n: int) -> None:
    for c in range(n + 1):
        outcomes = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(outcomes, k))
            brute = sum(any(s) for s in subsets) / len(subsets)
            assert pass_at_k(n, c, k) == pytest.approx(brute, abs=1e-12), (n, c, k)


def test_pass_at_k_is_stable_for_large_n() -> None:
    value = pass_at_k(2000, 3, 100)
    assert value == pytest.approx(1 - math.comb(1997, 100) / math.comb(2000, 100), rel=1e-9)


@pytest.mark.parametrize("n, c, k", [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)])
def test_pass_at_k_rejects_impossible_arguments(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_bootstrap_ci_contains_the_mean_and_narrows_with_more_data() -> None:
    rng = np.random.default_rng(1)
    small = rng.random(20) < 0.4
    large = rng.random(2000) < 0.4
    lo_s, hi_s = bootstrap_ci(small)
    lo_l, hi_l = bootstrap_ci(large)
    assert lo_s <= small.mean() <= hi_s
    assert lo_l <= large.mean() <= hi_l
    assert hi_l - lo_l < (hi_s - lo_s) / 3
    assert bootstrap_ci(small) == (lo_s, hi_s)  # seeded: same data, same interval


def test_bootstrap_ci_edge_cases_and_custom_stat() -> None:
    assert bootstrap_ci([0.7]) == (0.7, 0.7)
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    lo, hi = bootstrap_ci([1.0, 2.0, 3.0, 100.0], stat=lambda v: float(np.max(v)))
    assert 1.0 <= lo <= hi == 100.0


def record(family: str, correct: bool, samples: list[bool]) -> dict:
    return {"task_id": f"{family}-{len(samples)}", "family": family, "correct": correct, "sample_correct": samples}


def test_summarize_overall_and_per_family() -> None:
    records = [
        record("carry", False, [True, False, False, False]),
        record("carry", False, [False, False, False, False]),
        record("no_carry", True, [True, True, True, False]),
        record("no_carry", True, [True, True, True, True]),
        record("no_carry", False, [False, True, False, False]),
    ]
    summary = summarize(records, k_values=[1, 2, 4, 8], resamples=200)
    assert summary["tasks"] == 5 and summary["samples"] == 4
    overall = summary["overall"]
    # k=8 > 4 samples dropped; k=1 is mean@4 itself (pass_at_k(4, c, 1) = c/4), not a second column
    assert list(overall) == ["accuracy", "mean@4", "pass@2", "pass@4"]
    assert overall["accuracy"]["value"] == pytest.approx(2 / 5)
    assert overall["mean@4"]["value"] == pytest.approx((1 + 0 + 3 + 4 + 1) / 20)
    per_task_pass_1 = [pass_at_k(4, c, 1) for c in (1, 0, 3, 4, 1)]
    assert overall["mean@4"]["value"] == pytest.approx(sum(per_task_pass_1) / 5)
    assert overall["pass@4"]["value"] == pytest.approx(4 / 5)
    assert overall["pass@2"]["value"] == pytest.approx((0.5 + 0 + 1 + 1 + 0.5) / 5)
    for metric in overall.values():
        assert metric["ci_low"] <= metric["value"] <= metric["ci_high"]

    families = summary["families"]
    assert list(families) == ["carry", "no_carry"]
    assert families["carry"]["tasks"] == 2 and families["no_carry"]["tasks"] == 3
    assert families["carry"]["metrics"]["accuracy"]["value"] == 0.0
    assert families["carry"]["metrics"]["pass@4"]["value"] == pytest.approx(0.5)
    assert families["no_carry"]["metrics"]["accuracy"]["value"] == pytest.approx(2 / 3)
    assert families["no_carry"]["metrics"]["mean@4"]["value"] == pytest.approx(8 / 12)


def test_summarize_defaults_to_every_k_and_family_all() -> None:
    records = [{"correct": True, "sample_correct": [True, False, True]}]
    summary = summarize(records)
    assert list(summary["overall"]) == ["accuracy", "mean@3", "pass@2", "pass@3"]
    assert list(summary["families"]) == ["all"]


def test_per_task_scores_needs_the_same_number_of_samples_per_task() -> None:
    with pytest.raises(ValueError, match="different numbers of samples"):
        per_task_scores([record("a", True, [True]), record("a", True, [True, False])], [1])
