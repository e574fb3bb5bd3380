"""Top-entropy token selection ("Beyond the 80/20 rule"): by hand, and against TRL 1.16's
GRPOTrainer.get_high_entropy_mask on random batches."""

from __future__ import annotations

import pytest
import torch

from reference.trl_grpo import TRLGRPOLoss
from reinforge.algos.losses.entropy_selection import dropped_token_frac, high_entropy_mask


def test_by_hand() -> None:
    # Sampled entropies 0.1, 0.5, 0.9, 1.3, 2.0 (the 3.0 is padding, never counted).
    entropy = torch.tensor([[0.1, 0.5, 3.0], [0.9, 1.3, 2.0]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    # rho = 0.4: the 0.6-quantile of 5 sorted values sits at position 0.6 * 4 = 2.4, i.e.
    # 0.9 + 0.4 * (1.3 - 0.9) = 1.06: the tokens with 1.3 and 2.0 stay
    keep = high_entropy_mask(entropy, mask, 0.4)
    assert keep.tolist() == [[False, False, False], [False, True, True]]
    assert dropped_token_frac(keep, mask) == pytest.approx(3 / 5)
    assert high_entropy_mask(entropy, mask, 1.0).tolist() == mask.tolist()  # rho = 1: every sampled token
    assert high_entropy_mask(entropy, mask, 0.0).tolist() == [[False, False, False], [False, False, True]]  # the max only
    assert not high_entropy_mask(entropy, torch.zeros_like(mask), 0.2).any()  # nothing sampled: nothing kept
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        high_entropy_mask(entropy, mask, 1.5)


def random_case(seed: int, n: int = 5, t: int = 11):
    g = torch.Generator().manual_seed(seed)
    entropy = torch.rand(n, t, generator=g) * 3
    mask = torch.rand(n, t, generator=g) < 0.75
    mask &= torch.arange(t)[None, :] < torch.randint(0, t + 1, (n,), generator=g)[:, None]
    mask[1] = False
    if seed % 3 == 0:
        entropy[2, :4] = 1.0  # ties at the threshold
    return entropy, mask


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("rho", [0.0, 0.2, 0.5, 0.8, 1.0])
def test_matches_trl(seed, rho) -> None:
    entropy, mask = random_case(seed)
    trl = TRLGRPOLoss()
    expected = trl.get_high_entropy_mask(entropy, mask.long(), 1 - rho)
    assert high_entropy_mask(entropy, mask, rho).tolist() == expected.tolist()


def test_the_share_kept_is_about_rho() -> None:
    entropy, mask = random_case(1, n=40, t=50)
    keep = high_entropy_mask(entropy, mask, 0.2)
    assert dropped_token_frac(keep, mask) == pytest.approx(0.8, abs=0.01)
