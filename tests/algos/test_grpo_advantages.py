"""GRPO group-normalized advantages against a hand-computed example and their defining properties."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reinforge.algos.advantages.grpo import group_normalized_advantages
from reinforge.algos.registry import ADVANTAGE_ESTIMATORS, get_estimator
from reinforge.algos.types import AdvantageInputs

REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]

# By hand, unbiased (n - 1 = 3) std:
#   group 0: rewards 1,0,0,1  mean 0.5   centered +-0.5       var (4 * 0.25) / 3 = 1/3
#            std sqrt(1/3) = 0.57735027  A = +-0.5 / 0.57735027 = +-0.8660254 (= sqrt(3)/2)
#   group 1: rewards 1,1,1,1  zero variance                   A = 0 exactly
#   group 2: rewards 0,0,0,1  mean 0.25  centered -.25 x3, .75 var (3 * 0.0625 + 0.5625) / 3 = 0.25
#            std 0.5            A = -0.5, -0.5, -0.5, 1.5
EXPECTED = [0.8660254, -0.8660254, -0.8660254, 0.8660254, 0.0, 0.0, 0.0, 0.0, -0.5, -0.5, -0.5, 1.5]


def grpo(rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    mask = torch.ones(rewards.shape[0], 1, dtype=torch.bool)
    out = group_normalized_advantages(AdvantageInputs(rewards=rewards, group_ids=group_ids, mask=mask))
    return out.advantages, out.metrics


def test_hand_computed_example() -> None:
    adv, metrics = grpo(torch.tensor(REWARDS), torch.tensor(GROUPS))
    assert adv.shape == (12,)
    # eps = 1e-6 in the denominator moves the values by ~2e-6 relative.
    assert adv.tolist() == pytest.approx(EXPECTED, abs=1e-5)
    assert metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)
    assert metrics["advantage_abs_mean"] == pytest.approx(sum(abs(a) for a in EXPECTED) / 12, abs=1e-5)


def test_zero_variance_group_is_exactly_zero() -> None:
    adv, _ = grpo(torch.tensor(REWARDS), torch.tensor(GROUPS))
    assert torch.equal(adv[4:8], torch.zeros(4))
    # Constant but non-zero rewards (float noise would make centered values ~1e-17) are still exactly 0.
    adv, metrics = grpo(torch.tensor([0.3, 0.3, 0.3]), torch.tensor([7, 7, 7]))
    assert torch.equal(adv, torch.zeros(3))
    assert metrics["zero_variance_group_frac"] == 1.0


def test_interleaved_and_unordered_group_ids() -> None:
    # The same samples, shuffled, with arbitrary non-contiguous group labels.
    perm = [11, 4, 0, 9, 2, 6, 1, 10, 5, 3, 8, 7]
    relabel = {0: 42, 1: -3, 2: 5}
    rewards = torch.tensor([REWARDS[i] for i in perm])
    groups = torch.tensor([relabel[GROUPS[i]] for i in perm])
    adv, metrics = grpo(rewards, groups)
    assert adv.tolist() == pytest.approx([EXPECTED[i] for i in perm], abs=1e-5)
    assert metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)


def test_group_of_one_raises() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        grpo(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0, 1]))


def test_shape_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="1-D"):
        grpo(torch.tensor([1.0, 0.0]), torch.tensor([0, 0, 0]))


def test_registry_names_grpo_with_its_minimum_group() -> None:
    spec = get_estimator("grpo")
    assert spec.fn is group_normalized_advantages and spec.min_group_size == 2
    with pytest.raises(ValueError, match="grpo"):
        get_estimator("nope")
    assert "grpo" in ADVANTAGE_ESTIMATORS


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(
        # Quarter steps in [-100, 100]: realistic rewards, and a non-constant group has std >= ~0.18,
        # so eps = 1e-6 changes the std by less than 1e-5 relative.
        st.lists(st.integers(-400, 400).map(lambda q: q / 4), min_size=2, max_size=8),
        min_size=1,
        max_size=5,
    ),
    seed=st.integers(0, 2**16),
)
def test_non_constant_groups_are_standardized(groups: list[list[float]], seed: int) -> None:
    rewards = torch.tensor([r for g in groups for r in g], dtype=torch.float64)
    ids = torch.tensor([i for i, g in enumerate(groups) for _ in g])
    order = torch.randperm(len(ids), generator=torch.Generator().manual_seed(seed))
    rewards, ids = rewards[order], ids[order]
    adv, metrics = grpo(rewards, ids)
    constant = 0
    for i, g in enumerate(groups):
        a = adv[ids == i].double()
        if max(g) == min(g):
            constant += 1
            assert torch.equal(a, torch.zeros_like(a))
            continue
        assert a.mean().item() == pytest.approx(0.0, abs=1e-4)
        assert a.std(unbiased=True).item() == pytest.approx(1.0, rel=1e-4)
        # Order within the group is preserved: advantages are an increasing function of reward.
        r = rewards[ids == i]
        assert torch.equal(torch.argsort(a, stable=True), torch.argsort(r, stable=True))
    assert metrics["zero_variance_group_frac"] == pytest.approx(constant / len(groups))
    assert math.isfinite(metrics["advantage_abs_mean"])
