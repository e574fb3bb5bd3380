"""dr_mas: group normalization within each (group, agent) pair, hand-computed."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs


def run(rewards, groups, agents, **kw):
    n = len(rewards)
    agent_ids = None if agents is None else torch.tensor(agents)
    inputs = AdvantageInputs(torch.tensor(rewards), torch.tensor(groups), torch.ones(n, 1, dtype=torch.bool), agent_ids=agent_ids, **kw)
    out = get_estimator("dr_mas").fn(inputs)
    assert out.advantages.dtype == torch.float32 and out.returns is None
    return out.advantages.tolist(), out.metrics


def test_each_agent_is_normalized_within_its_own_samples_of_the_group() -> None:
    # group 0, agent 0 (X): 1, 0, -1   mean 0, var (1 + 0 + 1) / 2 = 1, std 1          -> 1, 0, -1
    # group 0, agent 1 (O): -1, -1     constant                                          -> 0, 0
    # group 1, agent 0 (X): 1, 1, 0    mean 2/3, centered 1/3, 1/3, -2/3, var 1/3, std 0.5773503
    #                                                                 -> 0.5773503, 0.5773503, -1.1547005
    # group 1, agent 1 (O): 0, 2       mean 1, centered -1, 1, var 2, std 1.4142136    -> -0.7071068, 0.7071068
    rewards = [1.0, -1.0, 0.0, -1.0, -1.0, 1.0, 0.0, 1.0, 2.0, 0.0]
    groups = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    agents = [0, 1, 0, 1, 0, 0, 1, 0, 1, 0]
    adv, metrics = run(rewards, groups, agents)
    expected = [1.0, 0.0, 0.0, 0.0, -1.0, 0.5773503, -0.7071068, 0.5773503, 0.7071068, -1.1547005]
    assert adv == pytest.approx(expected, abs=1e-5)
    assert metrics["zero_variance_group_frac"] == pytest.approx(1 / 4)
    grpo = get_estimator("grpo").fn(AdvantageInputs(torch.tensor(rewards), torch.tensor(groups), torch.ones(10, 1, dtype=torch.bool)))
    assert grpo.advantages.tolist() != pytest.approx(expected, abs=1e-3)  # one baseline over both agents differs


def test_an_agent_offset_does_not_move_the_advantages() -> None:
    # X's rewards shifted by +5 relative to O's: per-agent normalization removes the offset
    base, _ = run([1.0, 0.0, 1.0, 0.0], [0, 0, 0, 0], [0, 0, 1, 1])
    shifted, _ = run([6.0, 5.0, 1.0, 0.0], [0, 0, 0, 0], [0, 0, 1, 1])
    assert shifted == pytest.approx(base, abs=1e-6) and base == pytest.approx([0.7071068, -0.7071068] * 2, abs=1e-5)


def test_without_agents_it_is_grpo_and_single_samples_are_refused() -> None:
    rewards, groups = [2.0, 0.0, 3.0, 0.0], [0, 0, 1, 1]
    adv, _ = run(rewards, groups, None)
    grpo = get_estimator("grpo").fn(AdvantageInputs(torch.tensor(rewards), torch.tensor(groups), torch.ones(4, 1, dtype=torch.bool)))
    assert adv == pytest.approx(grpo.advantages.tolist())
    with pytest.raises(ValueError, match="at least 2 samples"):
        run([1.0, 0.0, 1.0], [0, 0, 0], [0, 1, 1])
