"""reinforce: -A logp per sampled token; old log-probs only feed the metrics."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.losses.policy import PolicyLossParams
from reinforge.algos.losses.reinforce import reinforce

PROBS = [[0.5, 0.25], [0.8, 0.1]]  # row 1's second token is masked
MASK = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
ADVANTAGES = torch.tensor([2.0, -1.0], dtype=torch.float64)


def test_hand_computed_loss_and_gradient() -> None:
    logprobs = torch.tensor(PROBS, dtype=torch.float64).log().requires_grad_(True)
    per_token, metrics = reinforce(logprobs, logprobs.detach().clone(), ADVANTAGES, MASK, PolicyLossParams())
    # -A logp: -2 ln 0.5 = 1.386294 | -2 ln 0.25 = 2.772589 | -(-1) ln 0.8 = -0.223144 | masked 0
    assert per_token.tolist()[0] == pytest.approx([1.386294, 2.772589], abs=1e-6)
    assert per_token.tolist()[1] == pytest.approx([-0.223144, 0.0], abs=1e-6)
    per_token.sum().backward()
    assert logprobs.grad.tolist() == [[-2.0, -2.0], [1.0, 0.0]]  # -A on sampled tokens
    assert metrics["ratio_mean"] == pytest.approx(1.0) and metrics["approx_kl_old"] == pytest.approx(0.0)


def test_old_logprobs_do_not_change_the_loss() -> None:
    logprobs = torch.tensor(PROBS, dtype=torch.float64).log()
    a, _ = reinforce(logprobs, torch.zeros(2, 2, dtype=torch.float64), ADVANTAGES, MASK, PolicyLossParams())
    b, metrics = reinforce(logprobs, logprobs - 0.1, ADVANTAGES, MASK, PolicyLossParams())
    assert torch.equal(a, b)
    assert metrics["ratio_mean"] == pytest.approx(1.1051709, abs=1e-6)  # exp(0.1)
