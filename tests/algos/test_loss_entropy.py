"""Entropy from logits: hand values, masked vocabularies, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from reinforge.algos.losses.entropy import entropy_from_logits


def test_hand_computed_values() -> None:
    logits = torch.tensor([[[0.0, 0.0, -math.inf], [0.0, math.log(3.0), -math.inf]]], dtype=torch.float64)
    # [0, 0, -inf]: p = [1/2, 1/2, 0] -> ln 2 = 0.693147
    # [0, ln 3, -inf]: p = [1/4, 3/4, 0] -> -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335
    h = entropy_from_logits(logits)
    assert h.shape == (1, 2)
    assert h[0].tolist() == pytest.approx([0.693147, 0.562335], abs=1e-6)


def test_differentiable_and_finite_with_masked_vocabulary() -> None:
    logits = torch.tensor([[[1.0, 2.0, -math.inf, 0.5]]], dtype=torch.float64, requires_grad=True)
    entropy_from_logits(logits).sum().backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 0, 2] == 0
    # dH/dz_v = -p_v (log p_v + H): check one entry against that closed form
    p = torch.softmax(logits.detach(), -1)
    h = -(p[p > 0] * p[p > 0].log()).sum()
    assert logits.grad[0, 0, 0].item() == pytest.approx((-p[0, 0, 0] * (p[0, 0, 0].log() + h)).item(), abs=1e-12)


def test_uniform_gives_log_vocabulary_size() -> None:
    h = entropy_from_logits(torch.zeros(2, 3, 5))
    assert h.shape == (2, 3) and h.flatten().tolist() == pytest.approx([math.log(5)] * 6)
