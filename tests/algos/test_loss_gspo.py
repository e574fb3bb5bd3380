"""gspo: sequence-level ratio and clip, its one aggregation, and sequence-level advantages."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.losses.aggregation import aggregate
from reinforge.algos.losses.gspo import gspo
from reinforge.algos.losses.policy import REQUIRED_AGGREGATION, PolicyLossParams
from reinforge.algos.types import LossNormalizer

# token ratios (old_logp = 0), masked positions marked by the mask only
RATIOS = [
    [2.0, 0.5, 7.0],  # A = +2, 2 tokens: s = exp((ln 2 + ln 0.5) / 2) = 1.0
    [1.1, 1.1, 1.1],  # A = +1, 3 tokens: s = 1.1
    [0.9, 7.0, 7.0],  # A = -1, 1 token:  s = 0.9
]
MASK = [[1, 1, 0], [1, 1, 1], [1, 0, 0]]
ADVANTAGES = [2.0, 1.0, -1.0]
NORM = LossNormalizer(num_tokens=6, num_sequences=3, max_response_tokens=3)


def assert_equal_to(t: torch.Tensor, expected: list) -> None:
    torch.testing.assert_close(t, torch.tensor(expected, dtype=t.dtype), atol=1e-12, rtol=0)


def inputs(requires_grad: bool = False):
    logprobs = torch.tensor(RATIOS, dtype=torch.float64).log().requires_grad_(requires_grad)
    return logprobs, torch.zeros(3, 3, dtype=torch.float64), torch.tensor(ADVANTAGES, dtype=torch.float64), torch.tensor(MASK, dtype=torch.bool)


def test_paper_clip_range_hand_computed() -> None:
    # default eps = (3e-4, 4e-4): range [0.9997, 1.0004]
    #   row 0: s = 1.0 inside          -> L = -2 * 1.0 = -2
    #   row 1: s = 1.1, A > 0, clipped  -> L = -min(1.1, 1.0004) = -1.0004
    #   row 2: s = 0.9, A < 0, clipped  -> L = -min(-0.9, -0.9997) = 0.9997
    logprobs, old, adv, mask = inputs(requires_grad=True)
    per_token, metrics = gspo(logprobs, old, adv, mask, PolicyLossParams())
    assert_equal_to(per_token, [[-2.0, -2.0, 0.0], [-1.0004] * 3, [0.9997, 0.0, 0.0]])
    assert metrics["clip_frac_high"] == pytest.approx(1 / 3)
    assert metrics["clip_frac_low"] == pytest.approx(1 / 3)
    assert metrics["clip_frac"] == pytest.approx(2 / 3)
    assert metrics["seq_ratio_mean"] == pytest.approx(1.0)  # (1.0 + 1.1 + 0.9) / 3

    # seq_mean_token_mean gives exactly the mean of the sequence losses: (-2 - 1.0004 + 0.9997) / 3
    loss = aggregate(per_token, mask, "seq_mean_token_mean", NORM)
    assert loss.item() == pytest.approx(-2.0007 / 3, abs=1e-12)
    loss.backward()
    # row 0: dL0/dlogp_t = -A s / n_0 = -2 * 1 / 2 = -1, then / 3 sequences -> -1/3 on each token
    # (the same on every token of the sequence, whatever its own ratio); rows 1, 2 clipped -> 0
    assert_equal_to(logprobs.grad, [[-1 / 3, -1 / 3, 0.0], [0.0] * 3, [0.0] * 3])


def test_loose_clip_range_hand_computed() -> None:
    logprobs, old, adv, mask = inputs(requires_grad=True)
    per_token, metrics = gspo(logprobs, old, adv, mask, PolicyLossParams(gspo_eps_low=0.2, gspo_eps_high=0.2))
    # nothing clipped: L = -s A = [-2, -1.1, 0.9]
    assert_equal_to(per_token, [[-2.0, -2.0, 0.0], [-1.1] * 3, [0.9, 0.0, 0.0]])
    assert metrics["clip_frac"] == 0.0
    aggregate(per_token, mask, "seq_mean_token_mean", NORM).backward()
    # dL_i/dlogp_t = -A_i s_i / n_i, then / 3: row 0 -1/3; row 1 -1.1 / 3 / 3 = -0.12222; row 2 0.9 / 1 / 3 = 0.3
    assert_equal_to(logprobs.grad, [[-1 / 3, -1 / 3, 0.0], [-1.1 / 9] * 3, [0.3, 0.0, 0.0]])


def test_defined_for_seq_mean_token_mean_only() -> None:
    assert REQUIRED_AGGREGATION["gspo"] == "seq_mean_token_mean"
    # token_mean would weigh row 1 (3 tokens) 3x row 2 (1 token): (-4 - 3.0012 + 0.9997) / 6 != mean
    per_token, _ = gspo(*inputs(), PolicyLossParams())
    assert aggregate(per_token, inputs()[3], "token_mean", NORM).item() == pytest.approx(-6.0015 / 6)


def test_per_token_advantages_must_be_constant_along_sampled_tokens() -> None:
    logprobs, old, adv, mask = inputs()
    expected, _ = gspo(logprobs, old, adv, mask, PolicyLossParams())
    broadcast = adv[:, None].expand(3, 3).clone()
    assert torch.equal(gspo(logprobs, old, broadcast, mask, PolicyLossParams())[0], expected)
    padded = broadcast * mask  # zeros on padding are fine
    assert torch.equal(gspo(logprobs, old, padded, mask, PolicyLossParams())[0], expected)
    varying = broadcast.clone()
    varying[1, 2] = 0.5
    with pytest.raises(ValueError, match="one advantage per sequence"):
        gspo(logprobs, old, varying, mask, PolicyLossParams())


def test_empty_row_contributes_nothing() -> None:
    logprobs, old, adv, mask = inputs()
    mask = mask.clone()
    mask[2] = False
    per_token, metrics = gspo(logprobs, old, adv, mask, PolicyLossParams())
    assert (per_token[2] == 0).all() and torch.isfinite(per_token).all()
    assert metrics["clip_frac"] == pytest.approx(1 / 2)  # over the 2 live sequences: row 1 clipped
