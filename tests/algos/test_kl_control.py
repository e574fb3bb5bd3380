"""The adaptive KL coefficient: by hand, against verl's AdaptiveKLController, and the KL it measures."""

from __future__ import annotations

import math

import pytest
import torch
from reference.verl_kl_penalty import AdaptiveKLController as VerlController

from reinforge.algos.kl_control import AdaptiveKLController, measured_kl


def test_hand_computed() -> None:
    # beta 0.1, target 0.05, horizon 1000, 64 samples a step:
    #   KL 0.06: e = 0.06/0.05 - 1 = 0.2   -> beta = 0.1 * (1 + 0.2 * 64/1000) = 0.10128
    #   KL 0.5:  e = 9 clipped to 0.2       -> beta = 0.10128 * 1.0128 = 0.102576384
    #   KL 0.0:  e = -1 clipped to -0.2     -> beta = 0.102576384 * 0.9872 = 0.1012634063
    ctl = AdaptiveKLController(0.1, 0.05, 1000)
    for kl, expected in [(0.06, 0.10128), (0.5, 0.102576384), (0.0, 0.1012634063)]:
        ctl.update(kl, 64)
        assert ctl.value == pytest.approx(expected, rel=1e-9)
    restored = AdaptiveKLController(0.1, 0.05, 1000)
    restored.load_state_dict(ctl.state_dict())
    assert restored.value == ctl.value


def test_matches_verl_over_a_run() -> None:
    g = torch.Generator().manual_seed(0)
    ours, theirs = AdaptiveKLController(0.001, 0.1, 10000), VerlController(0.001, 0.1, 10000)
    for _ in range(200):
        kl, n = torch.rand(1, generator=g).item() * 0.3, int(torch.randint(1, 512, (1,), generator=g))
        ours.update(kl, n)
        theirs.update(kl, n)
        assert ours.value == pytest.approx(theirs.value, rel=1e-12)


def test_refuses_a_zero_start() -> None:
    with pytest.raises(ValueError, match="kl_coef > 0"):
        AdaptiveKLController(0.0, 0.1, 100)


def test_measured_kl_is_a_mean_of_sequence_means() -> None:
    # k1 per token: row 0 (0.2, 0.4) -> 0.3; row 1 (1.0) -> 1.0; row 2 empty, left out: (0.3 + 1.0) / 2
    logp = torch.tensor([[0.2, 0.4], [1.0, 7.0], [3.0, 3.0]])
    mask = torch.tensor([[True, True], [True, False], [False, False]])
    assert measured_kl(logp, torch.zeros(3, 2), mask, "k1") == pytest.approx(0.65)
    assert measured_kl(logp, torch.zeros(3, 2), torch.zeros(3, 2, dtype=torch.bool), "k3") == 0.0
    # k3 of d = -0.2: e^-0.2 - 1 + 0.2
    assert measured_kl(logp[:1, :1], torch.zeros(1, 1), mask[:1, :1], "k3") == pytest.approx(math.exp(-0.2) - 0.8, rel=1e-5)
