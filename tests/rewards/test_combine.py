"""combine(): weighted sum, product, gates, clip; hand examples and hypothesis properties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reinforge.rewards.combine import Gate, combine

NAMES = ["a", "b", "c"]
values = st.floats(-10, 10, allow_nan=False)
parts_st = st.fixed_dictionaries({n: values for n in NAMES})
weights_st = st.fixed_dictionaries({n: st.floats(-5, 5, allow_nan=False) for n in NAMES})


def test_hand_examples() -> None:
    parts = {"correct": 1.0, "format": 0.5}
    weights = {"correct": 2.0, "format": 0.4}
    assert combine(parts, weights) == pytest.approx(2.2)
    assert combine(parts, weights, "product") == pytest.approx(2.0 * 0.2)
    # format counts only when correct >= 1: holds here, not with correct = 0
    gate = [Gate("format", "correct", 1.0)]
    assert combine(parts, weights, gates=gate) == pytest.approx(2.2)
    assert combine({"correct": 0.0, "format": 0.5}, weights, gates=gate) == pytest.approx(0.0)
    assert combine(parts, weights, clip=(0.0, 1.0)) == 1.0


def test_gates_read_ungated_values_and_all_must_hold() -> None:
    parts = {"a": 1.0, "b": 1.0, "c": 1.0}
    weights = {"a": 1.0, "b": 1.0, "c": 1.0}
    # b gated off by a (a < 2); c requires b, which is read ungated (1.0 >= 1) so c still counts
    assert combine(parts, weights, gates=[Gate("b", "a", 2.0), Gate("c", "b", 1.0)]) == 2.0
    assert combine(parts, weights, gates=[Gate("c", "a", 0.0), Gate("c", "b", 5.0)]) == 2.0


def test_bad_arguments_raise() -> None:
    with pytest.raises(KeyError, match="unknown part 'z'"):
        combine({"a": 1.0}, {"a": 1.0}, gates=[Gate("a", "z", 0.0)])
    with pytest.raises(ValueError, match="combine mode"):
        combine({"a": 1.0}, {"a": 1.0}, "max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="low <= high"):
        combine({"a": 1.0}, {"a": 1.0}, clip=(1.0, 0.0))


@settings(max_examples=60, deadline=None)
@given(parts_st, weights_st, weights_st, st.floats(-3, 3, allow_nan=False))
def test_weighted_sum_is_linear_in_weights(parts, w1, w2, k) -> None:
    mixed = {n: w1[n] + k * w2[n] for n in NAMES}
    expected = combine(parts, w1) + k * combine(parts, w2)
    assert combine(parts, mixed) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(parts_st, weights_st, st.sampled_from(NAMES), st.sampled_from(NAMES), st.sampled_from(["weighted_sum", "product"]))
def test_gate_above_the_max_value_zeroes_its_part(parts, weights, part, requires, mode) -> None:
    gated = combine(parts, weights, mode, gates=[Gate(part, requires, 10.5)])  # values are <= 10
    assert gated == pytest.approx(combine({**parts, part: 0.0}, weights, mode), rel=1e-12, abs=1e-12)
    if mode == "product":
        assert gated == 0.0


@settings(max_examples=60, deadline=None)
@given(parts_st, weights_st, st.sampled_from(["weighted_sum", "product"]), st.floats(-20, 20), st.floats(0, 20))
def test_clip_bounds_the_total(parts, weights, mode, low, width) -> None:
    total = combine(parts, weights, mode, clip=(low, low + width))
    assert low <= total <= low + width
    unclipped = combine(parts, weights, mode)
    if low <= unclipped <= low + width:
        assert total == unclipped


@settings(max_examples=60, deadline=None)
@given(parts_st, weights_st, st.sampled_from(NAMES))
def test_product_with_a_zero_part_is_zero(parts, weights, zero) -> None:
    assert combine({**parts, zero: 0.0}, weights, "product") == 0.0
    assert not math.isnan(combine(parts, weights, "product"))
