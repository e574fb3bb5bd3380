"""Truncated IS weights by hand, and that every policy loss multiplies its terms by them."""

from __future__ import annotations

import math

import pytest
import torch

from reinforge.algos.losses.importance import truncated_is_weights
from reinforge.algos.losses.policy import POLICY_LOSSES, PolicyLossParams


def test_hand_computed_weights_and_metrics() -> None:
    behaviour = torch.zeros(2, 2, dtype=torch.float64)
    # exp(proximal - behaviour) = [[0.5, 1.5], [3.0, 10.0 (masked)]]
    proximal = torch.tensor([[0.5, 1.5], [3.0, 10.0]], dtype=torch.float64).log().requires_grad_(True)
    mask = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
    weights, metrics = truncated_is_weights(proximal, behaviour, mask, cap=2.0)
    # min(w, 2): [[0.5, 1.5], [2.0, 0 (masked)]]
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.5], [2.0, 0.0]], dtype=torch.float64))
    assert not weights.requires_grad
    assert metrics["tis_weight_mean"] == pytest.approx(4.0 / 3)  # (0.5 + 1.5 + 2) / 3
    assert metrics["tis_capped_frac"] == pytest.approx(1 / 3)  # 3.0 > 2; the masked 10 does not count


def test_huge_masked_log_ratio_is_harmless() -> None:
    weights, _ = truncated_is_weights(torch.tensor([[0.0, 1e4]]), torch.zeros(1, 2), torch.tensor([[True, False]]), cap=2.0)
    assert weights.tolist() == [[1.0, 0.0]]


# gmpo weighs a sequence by its weights' geometric mean (as verl does) and vespo puts them into its
# sequence ratio (as TRL does): both checked against those references in test_loss_gmpo.py and
# test_loss_sequence_ratio.py with weights on.
SEQUENCE_WEIGHTED = {"gmpo", "vespo"}


@pytest.mark.parametrize("name", sorted(set(POLICY_LOSSES) - SEQUENCE_WEIGHTED))
def test_every_loss_multiplies_its_terms_by_the_weights(name: str) -> None:
    loss = POLICY_LOSSES[name]
    logprobs = torch.tensor([[0.6, 0.3, 0.9], [0.2, 0.5, 0.7]], dtype=torch.float64).log()
    old = torch.tensor([[0.5, 0.4, 0.9], [0.25, 0.5, 0.1]], dtype=torch.float64).log()
    adv = torch.tensor([1.0, -0.5], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    tis = torch.tensor([[0.5, 2.0, 1.0], [1.5, 0.0, 3.0]], dtype=torch.float64)
    plain, _ = loss(logprobs, old, adv, mask, PolicyLossParams())
    weighted, _ = loss(logprobs, old, adv, mask, PolicyLossParams(tis_weights=tis))
    torch.testing.assert_close(weighted, plain * tis * mask)
    assert plain[0, 0] != 0 and not math.isnan(weighted.sum().item())
