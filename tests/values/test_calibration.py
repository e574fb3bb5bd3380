"""Brier score and the reliability counts, by hand."""

from __future__ import annotations

import pytest
import torch

from reinforge.values.calibration import brier_score, reliability_counts, reliability_curve


def test_brier_score_by_hand():
    # (0.9-1)^2 + (0.2-0)^2 + (0.5-1)^2 + (1-1)^2 = 0.01 + 0.04 + 0.25 + 0 = 0.30; / 4 = 0.075
    assert brier_score(torch.tensor([0.9, 0.2, 0.5, 1.0]), torch.tensor([1.0, 0.0, 1.0, 1.0])) == pytest.approx(0.075)


def test_brier_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="one shape"):
        brier_score(torch.tensor([0.5]), torch.tensor([1.0, 0.0]))


def test_reliability_bins_by_hand():
    predicted = torch.tensor([0.05, 0.08, 0.55, 0.58, 1.0])
    outcome = torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0])
    counts = reliability_counts(predicted, outcome, bins=10)
    assert counts[0].tolist() == pytest.approx([0.13, 1.0, 2.0])
    assert counts[5].tolist() == pytest.approx([1.13, 2.0, 2.0])
    assert counts[9].tolist() == pytest.approx([1.0, 1.0, 1.0])  # p = 1.0 lands in the last bin
    curve = reliability_curve(counts)
    assert curve == [pytest.approx((0.065, 0.5, 2)), pytest.approx((0.565, 1.0, 2)), pytest.approx((1.0, 1.0, 1))]
