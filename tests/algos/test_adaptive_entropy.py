"""The adaptive entropy coefficient (Skywork-OR1; TRL use_adaptive_entropy), by hand."""

from __future__ import annotations

import math

import pytest

from reinforge.algos.losses.adaptive_entropy import AdaptiveEntropyCoef


def test_the_coefficient_follows_the_entropy_by_hand() -> None:
    control = AdaptiveEntropyCoef(coef=0.01, target=1.0, delta=0.02, coef_min=0.0, coef_max=0.05)
    assert control.applied() == 0.0  # no entropy measured yet: no bonus in the first step
    # step 1: two micro-batches, entropy (3.0 + 0.6) / (2 + 4) = 0.6 <= 1.0: up to 0.03
    control.observe(3.0, 2)
    control.observe(0.6, 4)
    assert control.end_step() == pytest.approx(0.6)
    assert control.coef == pytest.approx(0.03) and control.applied() == pytest.approx(0.03)
    # step 2: entropy 0.9, still low: up to 0.05 (the cap, not 0.05 + ...)
    control.observe(0.9, 1)
    control.end_step()
    control.observe(0.5, 1)
    control.end_step()
    assert control.coef == pytest.approx(0.05)
    # step 4: entropy 2.0 > target: down by 0.02, and no bonus while above the target
    control.observe(4.0, 2)
    control.end_step()
    assert control.coef == pytest.approx(0.03) and control.applied() == 0.0
    for _ in range(3):  # down to the floor, not below
        control.observe(2.0, 1)
        control.end_step()
    assert control.coef == 0.0


def test_an_empty_window_reads_as_zero_entropy_as_in_trl() -> None:
    control = AdaptiveEntropyCoef(coef=0.0, target=0.2, delta=0.005)
    control.end_step()  # TRL: sum / clamp(count, min=1) = 0 <= target
    assert control.coef == pytest.approx(0.005) and control.last_entropy == 0.0


def test_state_round_trip_continues_the_same_schedule() -> None:
    a = AdaptiveEntropyCoef(coef=0.1, target=1.0, delta=0.05)
    for entropy in (0.5, 0.7, 1.5):
        a.observe(entropy, 1)
        a.end_step()
    b = AdaptiveEntropyCoef(coef=0.1, target=1.0, delta=0.05)
    b.load_state_dict(a.state_dict())
    for control in (a, b):
        control.observe(0.2, 1)
        control.end_step()
    assert a.state_dict() == b.state_dict() and a.coef == pytest.approx(0.2)  # 0.1 -> 0.15 -> 0.2 -> 0.15 -> 0.2
    fresh = AdaptiveEntropyCoef(coef=0.1, target=1.0, delta=0.05)
    assert fresh.state_dict() == {"coef": 0.1, "last_entropy": math.inf}


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="step must be > 0"):
        AdaptiveEntropyCoef(coef=0.0, target=0.2, delta=0.0)
    with pytest.raises(ValueError, match="coef_min <= coef_max"):
        AdaptiveEntropyCoef(coef=0.0, target=0.2, delta=0.01, coef_min=0.5, coef_max=0.1)
