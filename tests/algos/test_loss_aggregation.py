"""Loss aggregation modes: hand values, micro-batch additivity, and each mode's length bias."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.losses.aggregation import AGGREGATIONS, aggregate
from reinforge.algos.types import LossNormalizer

MODES = sorted(AGGREGATIONS)


def test_hand_computed_values() -> None:
    per_token = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 5.0, 9.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)  # the 9s are padding
    norm = LossNormalizer(num_tokens=5, num_sequences=2, max_response_tokens=4)
    # masked sum = 1 + 2 + 3 + 4 + 5 = 15
    expected = {
        "token_mean": 3.0,  # 15 / 5 tokens
        "seq_mean_token_mean": 3.25,  # (6 / 3 + 9 / 2) / 2 = (2 + 4.5) / 2
        "seq_mean_token_sum": 7.5,  # 15 / 2 sequences
        "constant": 1.875,  # 15 / (2 sequences * 4 max tokens)
    }
    assert set(expected) == set(MODES)
    for mode, value in expected.items():
        assert aggregate(per_token, mask, mode, norm).item() == pytest.approx(value, abs=1e-12), mode


def test_unknown_mode_lists_valid_ones() -> None:
    norm = LossNormalizer(1, 1, 1)
    with pytest.raises(ValueError, match="seq_mean_token_mean") as err:
        aggregate(torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool), "sequence_mean", norm)
    assert "token_mean" in str(err.value) and "constant" in str(err.value)


@pytest.mark.parametrize("mode", MODES)
def test_all_masked_gives_zero_not_nan(mode: str) -> None:
    per_token = torch.ones(2, 3)
    loss = aggregate(per_token, torch.zeros(2, 3, dtype=torch.bool), mode, LossNormalizer(0, 2, 3))
    assert loss.item() == 0.0


@pytest.mark.parametrize("mode", MODES)
def test_disjoint_micro_batches_add_up_to_the_mini_batch(mode: str) -> None:
    gen = torch.Generator().manual_seed(0)
    per_token = torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([6, 1, 4, 0])  # one row has no sampled token at all
    mask = torch.arange(6)[None, :] < lengths[:, None]
    norm = LossNormalizer(num_tokens=int(mask.sum()), num_sequences=4, max_response_tokens=8)

    full = aggregate(per_token, mask, mode, norm)
    (full_grad,) = torch.autograd.grad(full, per_token)
    parts = [aggregate(per_token[rows], mask[rows], mode, norm) for rows in ([0, 2], [1, 3])]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item(), abs=1e-12)
    (split_grad,) = torch.autograd.grad(parts[0] + parts[1], per_token)
    assert torch.allclose(split_grad, full_grad, atol=1e-15)


def token_weights(mode: str, lengths: list[int], max_response_tokens: int = 8) -> torch.Tensor:
    """d(aggregate)/d(per_token loss): how much each token's loss counts, for equal per-token losses."""
    width = max(lengths)
    mask = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    per_token = torch.ones(len(lengths), width, dtype=torch.float64, requires_grad=True)
    norm = LossNormalizer(num_tokens=sum(lengths), num_sequences=len(lengths), max_response_tokens=max_response_tokens)
    aggregate(per_token, mask, mode, norm).backward()
    return per_token.grad


# A short (2 tokens) and a long (6 tokens) response, equal loss on every token. Row 0 short, row 1 long.
SHORT, LONG = 0, 1


def test_token_mean_weighs_every_token_alike_so_long_responses_weigh_more() -> None:
    w = token_weights("token_mean", [2, 6])
    # every token: 1 / 8 sampled tokens
    assert w[SHORT, :2].tolist() == [0.125] * 2 and w[LONG].tolist() == [0.125] * 6
    # per sequence: 2/8 vs 6/8, the long response counts 3x
    assert w[LONG].sum().item() == pytest.approx(3 * w[SHORT].sum().item())
    # but the per-token weight depends on the other responses of the batch: 1/12 next to a 6-token one
    assert token_weights("token_mean", [6, 6])[0, 0].item() == pytest.approx(1 / 12)


def test_seq_mean_token_mean_weighs_sequences_alike_so_short_tokens_weigh_more() -> None:
    w = token_weights("seq_mean_token_mean", [2, 6])
    # short: 1 / (2 tokens * 2 sequences) = 1/4 per token; long: 1 / (6 * 2) = 1/12 per token
    assert w[SHORT, :2].tolist() == pytest.approx([0.25] * 2)
    assert w[LONG].tolist() == pytest.approx([1 / 12] * 6)
    assert w[SHORT, 0].abs() == pytest.approx(3 * w[LONG, 0].abs().item())
    # each sequence totals 1/2: with a negative advantage, the long wrong answer's tokens are
    # penalized 3x less each than the short one's (GRPO's length bias, Liu et al. 2025)
    assert w[SHORT].sum().item() == pytest.approx(0.5) and w[LONG].sum().item() == pytest.approx(0.5)
    assert w[SHORT, 2:].abs().sum() == 0  # padding gets nothing


def test_seq_mean_token_sum_weighs_tokens_alike_and_long_sequences_more() -> None:
    w = token_weights("seq_mean_token_sum", [2, 6])
    # every token: 1 / 2 sequences
    assert w[SHORT, :2].tolist() == [0.5] * 2 and w[LONG].tolist() == [0.5] * 6
    assert w[LONG].sum().item() == pytest.approx(3.0) and w[SHORT].sum().item() == pytest.approx(1.0)


def test_constant_weighs_tokens_alike_whatever_the_lengths() -> None:
    w = token_weights("constant", [2, 6], max_response_tokens=8)
    # every token: 1 / (2 sequences * 8 max tokens) = 1/16
    assert w[SHORT, :2].tolist() == [0.0625] * 2 and w[LONG].tolist() == [0.0625] * 6
    # unchanged when the lengths in the batch change (token_mean's weight would move to 1/12, 1/4)
    assert token_weights("constant", [6, 6])[0, 0].item() == 0.0625
    assert token_weights("constant", [1, 1])[0, 0].item() == 0.0625
