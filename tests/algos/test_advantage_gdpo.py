"""gdpo: per-component group normalization, weighted sum, batch standardization."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs

GROUPS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
CORRECT = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
FORMAT = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
WEIGHTS = {"correct": 1.0, "format": 0.5}


def run(components: dict[str, list[float]], weights: dict[str, float], groups: list[int]):
    n = len(groups)
    total = [sum(weights[k] * v[i] for k, v in components.items()) for i in range(n)]
    inputs = AdvantageInputs(
        torch.tensor(total), torch.tensor(groups), torch.ones(n, 1, dtype=torch.bool),
        reward_components={k: torch.tensor(v) for k, v in components.items()}, reward_weights=weights,
    )
    return get_estimator("gdpo").fn(inputs)


def test_hand_computed_example() -> None:
    # Per component, within groups (unbiased std):
    #   correct: g0 1,0,0,1 -> +-0.8660254;  g1 constant -> 0;  g2 0,0,0,1 -> -0.5,-0.5,-0.5,1.5
    #   format:  g0 1,1,0,1 mean 0.75, centered .25,.25,-.75,.25, var 0.75/3 = 0.25, std 0.5 -> 0.5,0.5,-1.5,0.5
    #            g1, g2 constant -> 0
    # Weighted sum S = correct + 0.5 format:
    #   g0: 1.1160254, -0.6160254, -1.6160254, 1.1160254;  g1: 0 x4;  g2: -0.5, -0.5, -0.5, 1.5
    # Batch: mean 0; squares 2 (1.2455127) + 0.3794873 + 2.6115381 + 3 (0.25) + 2.25 = 8.4820508,
    # unbiased var / 11 = 0.7710955, std 0.8781204. A = S / 0.8781204:
    #   g0: 1.2709241, -0.7015274, -1.8403211, 1.2709241;  g1: 0 exactly;  g2: -0.5693980 x3, 1.7081941
    out = run({"correct": CORRECT, "format": FORMAT}, WEIGHTS, GROUPS)
    expected = [1.2709241, -0.7015274, -1.8403211, 1.2709241, 0, 0, 0, 0, -0.5693980, -0.5693980, -0.5693980, 1.7081941]
    assert out.advantages.tolist() == pytest.approx(expected, abs=1e-5)
    assert torch.equal(out.advantages[4:8], torch.zeros(4))
    assert out.metrics["zero_variance_group_frac"] == pytest.approx(1 / 3)  # every component constant
    assert out.metrics["zero_variance_group_frac/format"] == pytest.approx(2 / 3)


def test_reward_combinations_grpo_collapses_stay_apart() -> None:
    # The paper's motivating case, two rollouts per group, two binary rewards (a, b), weights 1:
    #   group 0: (0,0), (0,1) -> totals 0, 1;   group 1: (0,0), (1,1) -> totals 0, 2.
    # GRPO on the totals gives both groups -0.7071068, +0.7071068: the better combination is lost.
    # GDPO: group 0: a constant -> 0, b 0,1 -> -+0.7071068;  sum -0.7071068, 0.7071068
    #       group 1: a 0,1 -> -+0.7071068, b 0,1 -> -+0.7071068; sum -1.4142136, 1.4142136
    # Batch: mean 0, squares 0.5 + 0.5 + 2 + 2 = 5, unbiased var 5/3, std 1.2909944
    # -> -0.5477226, 0.5477226, -1.0954451, 1.0954451
    out = run({"a": [0.0, 0.0, 0.0, 1.0], "b": [0.0, 1.0, 0.0, 1.0]}, {"a": 1.0, "b": 1.0}, [0, 0, 1, 1])
    assert out.advantages.tolist() == pytest.approx([-0.5477226, 0.5477226, -1.0954451, 1.0954451], abs=1e-5)
    assert out.metrics["zero_variance_group_frac"] == 0.0
    assert out.metrics["zero_variance_group_frac/a"] == 0.5


def test_single_component_is_batch_standardized_grpo() -> None:
    # One component: S = w * grpo, and batch standardization removes w.
    # grpo here: +-0.8660254 (g0), 0 (g1), -0.5 x3, 1.5 (g2); these have batch mean 0 and
    # unbiased std sqrt((4 * 0.75 + 3 * 0.25 + 2.25) / 11) = sqrt(6 / 11) = 0.7385489
    out = run({"correct": CORRECT}, {"correct": 3.0}, GROUPS)
    grpo = get_estimator("grpo").fn(
        AdvantageInputs(torch.tensor(CORRECT), torch.tensor(GROUPS), torch.ones(12, 1, dtype=torch.bool))
    ).advantages
    assert out.advantages.tolist() == pytest.approx((grpo / grpo.std()).tolist(), abs=1e-5)
    assert out.advantages[0].item() == pytest.approx(0.8660254 / 0.7385489, abs=1e-5)


def test_interleaved_group_ids() -> None:
    perm = [11, 4, 0, 9, 2, 6, 1, 10, 5, 3, 8, 7]
    base = run({"correct": CORRECT, "format": FORMAT}, WEIGHTS, GROUPS).advantages
    out = run(
        {"correct": [CORRECT[i] for i in perm], "format": [FORMAT[i] for i in perm]},
        WEIGHTS, [[30, -1, 8][GROUPS[i]] for i in perm],
    )
    assert out.advantages.tolist() == pytest.approx(base[perm].tolist(), abs=1e-6)


def test_missing_components_or_weights_raise() -> None:
    with pytest.raises(ValueError, match="reward_components"):
        run({}, {}, [0, 0])
    with pytest.raises(ValueError, match="one weight per reward component"):
        run({"a": [1.0, 0.0]}, {"a": 1.0, "b": 1.0}, [0, 0])
    with pytest.raises(ValueError, match="at least 2"):
        run({"a": [1.0, 0.0, 1.0]}, {"a": 1.0}, [0, 0, 1])
