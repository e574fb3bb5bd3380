"""filter_logits / sample_next on hand-made logits, and SamplingParams validation."""

from __future__ import annotations

import math

import pytest
import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.sampling import filter_logits, sample_next

NEG_INF = float("-inf")


def kept(logits: torch.Tensor) -> list[set[int]]:
    return [set(torch.isfinite(row).nonzero().squeeze(1).tolist()) for row in logits]


def logits_from_probs(probs: list[float]) -> torch.Tensor:
    return torch.tensor(probs).log()[None]


# ----------------------------------------------------------------------------- top-k


def test_top_k_keeps_exactly_the_k_largest_per_row() -> None:
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5, 2.5], [5.0, -1.0, 0.0, 4.0, 4.5]])
    out = filter_logits(logits, top_k=2, top_p=1.0)
    assert kept(out) == [{1, 4}, {0, 4}]
    # kept logits are untouched, dropped ones are -inf
    assert torch.equal(out[torch.isfinite(out)], logits[torch.isfinite(out)])
    assert (out[~torch.isfinite(out)] == NEG_INF).all()


def test_top_k_one_is_argmax_and_zero_or_large_k_keeps_everything() -> None:
    logits = torch.tensor([[0.1, 0.7, -2.0, 0.3]])
    assert kept(filter_logits(logits, top_k=1, top_p=1.0)) == [{1}]
    assert torch.equal(filter_logits(logits, top_k=0, top_p=1.0), logits)
    assert torch.equal(filter_logits(logits, top_k=4, top_p=1.0), logits)
    assert torch.equal(filter_logits(logits, top_k=100, top_p=1.0), logits)


# ----------------------------------------------------------------------------- top-p


@pytest.mark.parametrize(
    "top_p, expected",
    [
        (1.0, {0, 1, 2, 3}),
        (0.99, {0, 1, 2, 3}),  # mass before the last token is 0.95 < 0.99
        (0.9, {0, 1, 2}),  # mass before token 3 is 0.95 >= 0.9
        (0.75, {0, 1}),  # mass before token 2 is 0.8 >= 0.75
        (0.45, {0}),  # the best token alone already holds 0.5
        (0.01, {0}),  # the best token is always kept
    ],
)
def test_top_p_keeps_the_smallest_nucleus(top_p: float, expected: set[int]) -> None:
    # probabilities 0.5, 0.3, 0.15, 0.05, stored out of order so sorting matters
    probs = [0.15, 0.5, 0.05, 0.3]
    order = [1, 3, 0, 2]  # index of the 1st, 2nd, 3rd, 4th most likely token
    logits = logits_from_probs(probs)
    got = kept(filter_logits(logits, top_k=0, top_p=top_p))[0]
    assert got == {order[i] for i in expected}


def test_top_p_is_invariant_to_a_shift_of_the_logits() -> None:
    logits = logits_from_probs([0.15, 0.5, 0.05, 0.3])
    assert kept(filter_logits(logits + 7.0, 0, 0.75)) == kept(filter_logits(logits, 0, 0.75)) == [{1, 3}]


def test_top_k_then_top_p_on_the_renormalised_distribution() -> None:
    # top-2 of (0.5, 0.3, 0.15, 0.05) renormalises to (0.625, 0.375): the best token alone
    # reaches top_p=0.6, so only it survives (without top-k, 0.5 < 0.6 would keep two tokens).
    logits = logits_from_probs([0.5, 0.3, 0.15, 0.05])
    assert kept(filter_logits(logits, top_k=2, top_p=0.6)) == [{0}]
    assert kept(filter_logits(logits, top_k=0, top_p=0.6)) == [{0, 1}]
    assert kept(filter_logits(logits, top_k=3, top_p=0.9)) == [{0, 1, 2}]


# ----------------------------------------------------------------------------- sample_next


def test_greedy_is_argmax_with_untempered_logprob() -> None:
    logits = torch.randn(6, 11, generator=torch.Generator().manual_seed(0)) * 3
    tokens, logprobs = sample_next(logits, SamplingParams(temperature=0.0), generator=None)
    assert torch.equal(tokens, logits.argmax(-1))
    expected = logits.log_softmax(-1).gather(-1, tokens[:, None]).squeeze(-1)
    torch.testing.assert_close(logprobs, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.5, 3, 1.0), (0.7, 4, 0.8)])
def test_behaviour_logprob_is_log_softmax_of_tempered_logits(temperature, top_k, top_p) -> None:
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(512, 9, generator=generator) * 2
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    tokens, logprobs = sample_next(logits, params, generator)
    # before truncation: the learner recomputes exactly this from the same tokens
    expected = (logits / temperature).log_softmax(-1).gather(-1, tokens[:, None]).squeeze(-1)
    torch.testing.assert_close(logprobs, expected, rtol=0, atol=1e-6)
    # and no sampled token was outside the top-k / top-p set
    allowed = torch.isfinite(filter_logits((logits / temperature).log_softmax(-1), top_k, top_p))
    assert allowed.gather(-1, tokens[:, None]).all()
    if top_k:
        assert (allowed.sum(-1) <= top_k).all()


def test_sampled_frequencies_follow_the_renormalised_top_k_distribution() -> None:
    probs = torch.tensor([0.4, 0.1, 0.3, 0.2])
    logits = probs.log().expand(4000, 4)
    tokens, _ = sample_next(logits, SamplingParams(temperature=1.0, top_k=2), torch.Generator().manual_seed(0))
    counts = torch.bincount(tokens, minlength=4).float() / len(tokens)
    assert counts[1] == 0 and counts[3] == 0
    assert abs(counts[0].item() - 0.4 / 0.7) < 0.03


def test_seeded_sampling_is_reproducible() -> None:
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(2))
    params = SamplingParams(temperature=0.9, top_p=0.95)
    a = sample_next(logits, params, torch.Generator().manual_seed(123))
    b = sample_next(logits, params, torch.Generator().manual_seed(123))
    c = sample_next(logits, params, torch.Generator().manual_seed(124))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


# ----------------------------------------------------------------------------- SamplingParams


@pytest.mark.parametrize("temperature", [-0.1, -1.0, math.nan])
def test_invalid_temperature_is_rejected(temperature: float) -> None:
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=temperature)


def test_zero_and_positive_temperatures_are_valid() -> None:
    assert SamplingParams(temperature=0.0).temperature == 0.0
    assert SamplingParams(temperature=2.5).temperature == 2.5


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_other_invalid_params_are_rejected(kwargs, field) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)
