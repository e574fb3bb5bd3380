"""The advantage registry: names, group-size and critic requirements, lookup errors, the shim."""

from __future__ import annotations

import pytest
import torch

import reinforge.algos.registry as shim
from reinforge.algos.advantages import ADVANTAGE_ESTIMATORS, EstimatorSpec, get_estimator, register_advantage
from reinforge.algos.types import AdvantageInputs, AdvantageOutput

EXPECTED = {  # name: (min_group_size, needs_critic)
    "grpo": (2, False),
    "dr_grpo": (2, False),
    "rloo": (2, False),
    "reinforce_pp": (1, False),
    "reinforce_pp_baseline": (2, False),
    "gdpo": (2, False),
    "pass_at_k": (2, False),
    "gae": (1, True),
    "v05_prior": (1, False),
}


def test_all_estimators_registered_with_their_requirements() -> None:
    assert set(EXPECTED) <= set(ADVANTAGE_ESTIMATORS)
    for name, (min_group_size, needs_critic) in EXPECTED.items():
        spec = get_estimator(name)
        assert isinstance(spec, EstimatorSpec) and spec.name == name
        assert (spec.min_group_size, spec.needs_critic) == (min_group_size, needs_critic), name
        assert spec.fn.__doc__ and "20" in spec.fn.__doc__, f"{name} docstring must cite its paper"


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="unknown advantage estimator 'nope'") as err:
        get_estimator("nope")
    for name in EXPECTED:
        assert name in str(err.value)


def test_compat_shim_reexports_the_registry() -> None:
    assert shim.get_estimator is get_estimator and shim.ADVANTAGE_ESTIMATORS is ADVANTAGE_ESTIMATORS


def test_registering_a_taken_name_raises() -> None:
    def other(inputs: AdvantageInputs) -> AdvantageOutput:
        return AdvantageOutput(advantages=inputs.rewards)

    with pytest.raises(ValueError, match="already registered"):
        register_advantage("grpo")(other)
    assert get_estimator("grpo").fn is not other


def test_every_estimator_runs_on_one_batch() -> None:
    # Two groups of 2, a 3-token mask, components, values: every estimator returns finite float32
    # advantages of [N] or [N, T], zero outside the mask when per token.
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 1], [1, 0, 0]], dtype=torch.bool)
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 0.0, 0.0, 1.0]), group_ids=torch.tensor([3, 3, 8, 8]), mask=mask,
        reward_components={"correct": torch.tensor([1.0, 0.0, 0.0, 1.0])}, reward_weights={"correct": 1.0},
        values=torch.full((4, 3), 0.5), pass_k=2,
        prompt_values=torch.tensor([0.3, 0.3, 0.6, 0.6], dtype=torch.float64), prompt_value_var=torch.full((4,), 0.02, dtype=torch.float64),
        turn_index=torch.where(mask, 0, -1), turn_counts=torch.ones(4, dtype=torch.long),  # one turn each
        old_logprobs=torch.full((4, 3), -0.7), sum_pi_squared=torch.full((4, 3), 0.4),  # optimal token baseline
        greedy_rewards=torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64),  # remax
    )
    for name, spec in ADVANTAGE_ESTIMATORS.items():
        out = spec.fn(inputs)
        assert isinstance(out, AdvantageOutput), name
        assert out.advantages.dtype == torch.float32 and torch.isfinite(out.advantages).all(), name
        assert out.advantages.shape in {(4,), (4, 3)}, name
        if out.advantages.dim() == 2:
            assert torch.equal(out.advantages[~mask], torch.zeros(int((~mask).sum()))), name
        assert all(isinstance(v, float) for v in out.metrics.values()), name
