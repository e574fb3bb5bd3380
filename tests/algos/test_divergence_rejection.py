"""Divergence-based rollout rejection (k2 / k3, token and sequence sum / mean / max, chained):
by hand, and against verl's compute_rollout_rejection_mask on random batches."""

from __future__ import annotations

import math

import pytest
import torch

from reference.verl_rollout_corr import compute_rollout_rejection_mask
from reinforge.algos.losses.divergence_rejection import OPTIONS, divergence_rejection_mask

# Behaviour log-probs 0; proximal log-ratios d chosen so that k2 = d^2 / 2 is easy:
#   sample 0: d = 0.2, -0.6, (padding: 50, never counted)   k2 = 0.02, 0.18         sum 0.20, mean 0.10, max 0.18
#   sample 1: d = 0.1, 0.1, 0.4                              k2 = 0.005, 0.005, 0.08  sum 0.09, mean 0.03, max 0.08
#   sample 2: no sampled token
D = torch.tensor([[0.2, -0.6, 50.0], [0.1, 0.1, 0.4], [0.0, 0.0, 0.0]], dtype=torch.float64)
MASK = torch.tensor([[True, True, False], [True, True, True], [False, False, False]])
BEHAVIOUR = torch.zeros(3, 3, dtype=torch.float64)


@pytest.mark.parametrize(
    ("option", "threshold", "keep"),
    [
        ("token_k2", 0.05, [[True, False, False], [True, True, False]]),  # 0.18 and 0.08 exceed 0.05
        ("seq_sum_k2", 0.15, [[False, False, False], [True, True, True]]),  # 0.20 > 0.15 >= 0.09
        ("seq_mean_k2", 0.05, [[False, False, False], [True, True, True]]),  # 0.10 > 0.05 >= 0.03
        ("seq_max_k2", 0.1, [[False, False, False], [True, True, True]]),  # 0.18 > 0.1 >= 0.08
        ("seq_max_k2", 0.2, [[True, True, False], [True, True, True]]),  # both maxima under 0.2
    ],
)
def test_k2_criteria_by_hand(option, threshold, keep) -> None:
    kept, metrics = divergence_rejection_mask(D, BEHAVIOUR, MASK, [option], [threshold])
    assert kept[:2].tolist() == keep and not kept[2].any()
    rejected = sum(m and not k for row_m, row_k in zip(MASK[:2].tolist(), keep) for m, k in zip(row_m, row_k))
    assert metrics["mask/rollout_reject_frac"] == pytest.approx(rejected / 5)
    assert metrics[f"rollout_reject/{option}_frac"] == pytest.approx(rejected / 5)


def test_k3_by_hand_and_chaining_is_an_and() -> None:
    # k3(d) = exp(d) - 1 - d: k3(-0.6) = 0.1488, k3(0.4) = 0.0918, k3(0.2) = 0.0214, k3(0.1) = 0.0052
    assert math.exp(-0.6) + 0.6 - 1 == pytest.approx(0.148812, abs=1e-6)
    kept, _ = divergence_rejection_mask(D, BEHAVIOUR, MASK, ["token_k3"], [0.1])
    assert kept[:2].tolist() == [[True, False, False], [True, True, True]]  # only -0.6 exceeds 0.1
    # chained with seq_sum_k2 <= 0.15 (sample 0 out): the union of what each rejects
    chained, metrics = divergence_rejection_mask(D, BEHAVIOUR, MASK, ["token_k3", "seq_sum_k2"], [0.1, 0.15])
    assert chained[:2].tolist() == [[False, False, False], [True, True, True]]
    assert metrics["rollout_reject/token_k3_frac"] == pytest.approx(1 / 5)
    assert metrics["rollout_reject/seq_sum_k2_frac"] == pytest.approx(2 / 5)
    assert metrics["mask/rollout_reject_frac"] == pytest.approx(2 / 5)
    assert metrics["mask/rollout_reject_samples_frac"] == pytest.approx(1 / 2)  # over the samples with tokens


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown rollout rejection criterion 'token_k1'"):
        divergence_rejection_mask(D, BEHAVIOUR, MASK, ["token_k1"], [0.1])
    with pytest.raises(ValueError, match="one shared or one each"):
        divergence_rejection_mask(D, BEHAVIOUR, MASK, ["token_k2", "seq_max_k3", "seq_sum_k2"], [0.1, 0.2])
    with pytest.raises(ValueError, match="must be > 0"):
        divergence_rejection_mask(D, BEHAVIOUR, MASK, ["token_k2"], [0.0])


def random_case(seed: int, n: int = 6, t: int = 9):
    g = torch.Generator().manual_seed(seed)
    behaviour = torch.log(torch.rand(n, t, generator=g) * 0.9 + 0.05)
    proximal = behaviour + torch.randn(n, t, generator=g) * 0.4
    mask = torch.rand(n, t, generator=g) < 0.7  # gaps inside rows, as multi-turn masks have
    lengths = torch.randint(0, t + 1, (n,), generator=g)
    mask &= torch.arange(t)[None, :] < lengths[:, None]  # ragged
    mask[0] = False  # an empty row
    proximal[~mask] = 80.0  # padding's log-probs are never read
    return proximal, behaviour, mask


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("options", [[o] for o in OPTIONS] + [["token_k3", "seq_mean_k2"], ["seq_max_k3", "seq_sum_k2", "token_k2"]])
def test_matches_verl(seed, options) -> None:
    proximal, behaviour, mask = random_case(seed)
    thresholds = [0.02 + 0.03 * i for i in range(len(options))]
    kept, _ = divergence_rejection_mask(proximal, behaviour, mask, options, thresholds)
    expected = compute_rollout_rejection_mask(
        proximal - behaviour, mask.float(), ",".join(options), ",".join(str(c) for c in thresholds)
    )
    assert kept.tolist() == expected.bool().tolist()


@pytest.mark.parametrize("option", OPTIONS)
def test_the_random_cases_both_keep_and_reject(option) -> None:
    # Guard against a vacuous comparison above: over the seeds, each criterion rejects some tokens and keeps others.
    kept = rejected = 0
    for seed in range(8):
        proximal, behaviour, mask = random_case(seed)
        keep, _ = divergence_rejection_mask(proximal, behaviour, mask, [option], [0.02])
        kept += int(keep.sum())
        rejected += int((mask & ~keep).sum())
    assert kept > 0 and rejected > 0


def test_a_huge_log_ratio_is_clamped_as_in_verl() -> None:
    proximal = torch.tensor([[30.0, 0.0]])  # k3 of 30 overflows nothing once clamped to 20
    kept, _ = divergence_rejection_mask(proximal, torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool), ["token_k3"], [1e9])
    assert kept.tolist() == [[True, True]]  # exp(20) - 21 = 4.85e8 <= 1e9
