"""The log-prob gap metric by hand: |learner - engine| and the ratio exp(learner - engine) on
sampled tokens only; the first-step warning when the gap is large and nothing corrects it."""

from __future__ import annotations

import math

import pytest
import torch

from reinforge.algos.logprob_gap import GAP_WARNING_THRESHOLD, NO_TOKENS, logprob_gap_metrics, measured_gap_warning
from reinforge.learner.policy_learner import accumulate_metric


def test_hand_computed_gap_and_ratios() -> None:
    engine = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -4.0, -9.0]])
    # learner - engine on the sampled tokens: 0.2, -0.1 | 0.0, 0.4; the masked -9 -> 0 is left out
    learner = torch.tensor([[-0.8, -2.1, -7.0], [-0.3, -3.6, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    m = logprob_gap_metrics(learner, engine, mask)
    assert m["logprob_gap/abs_mean"] == pytest.approx((0.2 + 0.1 + 0.0 + 0.4) / 4, abs=1e-6)
    assert m["logprob_gap/abs_max"] == pytest.approx(0.4, abs=1e-6)
    assert m["logprob_gap/ratio_mean"] == pytest.approx((math.exp(0.2) + math.exp(-0.1) + 1 + math.exp(0.4)) / 4, abs=1e-6)
    assert m["logprob_gap/ratio_min"] == pytest.approx(math.exp(-0.1), abs=1e-6)
    assert m["logprob_gap/ratio_max"] == pytest.approx(math.exp(0.4), abs=1e-6)


def test_equal_logprobs_have_no_gap_and_no_tokens_give_neutral_values() -> None:
    lp = torch.tensor([[-1.5, -0.25]])
    m = logprob_gap_metrics(lp, lp.clone(), torch.tensor([[True, True]]))
    assert m["logprob_gap/abs_mean"] == 0.0 and m["logprob_gap/ratio_min"] == m["logprob_gap/ratio_max"] == 1.0
    assert logprob_gap_metrics(lp, lp + 1, torch.tensor([[False, False]])) == NO_TOKENS


def test_micro_batches_combine_means_by_token_share_and_extremes_by_max_min() -> None:
    """Two micro-batches (3 and 1 sampled tokens) give the whole batch's values, an empty one changes nothing."""
    engine = torch.zeros(2, 3)
    learner = torch.tensor([[0.1, -0.3, 0.2], [0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    whole = logprob_gap_metrics(learner, engine, mask)
    parts = [(logprob_gap_metrics(learner[i : i + 1], engine[i : i + 1], mask[i : i + 1]), mask[i].sum().item() / 4) for i in (0, 1)]
    parts.append((logprob_gap_metrics(learner[:1], engine[:1], torch.zeros(1, 3, dtype=torch.bool)), 0.0))
    totals: dict[str, float] = {}
    for metrics, share in parts:
        for key, value in metrics.items():
            totals[key] = accumulate_metric(key, totals.get(key), value, share)
    assert totals == pytest.approx(whole, abs=1e-9)


def test_the_first_step_warning_names_tis_cap_only_when_needed() -> None:
    big = {"logprob_gap/abs_mean": 0.02, "logprob_gap/abs_max": 0.5}
    warning = measured_gap_warning(big, tis_cap=None)
    assert warning is not None and "algo.tis_cap" in warning and "0.02" in warning
    assert measured_gap_warning(big, tis_cap=2.0) is None
    assert measured_gap_warning({"logprob_gap/abs_mean": GAP_WARNING_THRESHOLD / 10}, tis_cap=None) is None
    assert measured_gap_warning({}, tis_cap=None) is None  # nothing measured this step
