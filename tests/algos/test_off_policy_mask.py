"""Off-policy sequence masking (DeepSeek-V3.2 eq. 9): by hand, and against TRL 1.16's
GRPOTrainer.get_off_policy_mask on random batches."""

from __future__ import annotations

import pytest
import torch

from reference.trl_grpo import TRLGRPOLoss
from reinforge.algos.losses.off_policy_mask import off_policy_sequence_mask


def test_by_hand() -> None:
    # mean(logp_behaviour - logp) per sample over sampled tokens:
    #   sample 0: (0.4 + 0.8) / 2 = 0.6    A = -1  -> 0.6 > 0.5: dropped
    #   sample 1: (0.4 + 0.8) / 2 = 0.6    A = +1  -> a positive sample is always kept
    #   sample 2: (0.2 + 0.4 + 0.6) / 3 = 0.4, A = -1 -> 0.4 <= 0.5: kept
    #   sample 3: nothing sampled
    logprobs = torch.tensor([[-1.4, -1.8, -9.0], [-1.4, -1.8, -9.0], [-1.2, -1.4, -1.6], [0.0, 0.0, 0.0]])
    behaviour = torch.full((4, 3), -1.0)
    mask = torch.tensor([[True, True, False], [True, True, False], [True, True, True], [False, False, False]])
    keep = off_policy_sequence_mask(torch.tensor([-1.0, 1.0, -1.0, -1.0]), logprobs, behaviour, mask, 0.5)
    assert keep.tolist() == [[False, False, False], [True, True, False], [True, True, True], [False, False, False]]
    # [N, T] advantages decide per token: the negative token of sample 0 goes, the positive one stays
    token_adv = torch.tensor([[-1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [-1.0, -1.0, -1.0], [0.0, 0.0, 0.0]])
    keep = off_policy_sequence_mask(token_adv, logprobs, behaviour, mask, 0.5)
    assert keep[0].tolist() == [False, True, False]
    # the mask is a function of detached values: no gradient flows through it
    grad_lp = logprobs.clone().requires_grad_(True)
    assert not off_policy_sequence_mask(torch.ones(4), grad_lp, behaviour, mask, 0.5).requires_grad


def random_case(seed: int, n: int = 7, t: int = 10):
    g = torch.Generator().manual_seed(seed)
    behaviour = torch.log(torch.rand(n, t, generator=g) * 0.9 + 0.05)
    logprobs = behaviour + torch.randn(n, t, generator=g) * 0.6
    mask = torch.rand(n, t, generator=g) < 0.7
    mask &= torch.arange(t)[None, :] < torch.randint(0, t + 1, (n,), generator=g)[:, None]
    mask[0] = False
    advantages = torch.randn(n, generator=g)
    advantages[1] = 0.0  # A = 0 counts as non-negative
    return advantages, logprobs, behaviour, mask


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("delta", [0.05, 0.2, 0.5])
@pytest.mark.parametrize("token_level", [False, True])
def test_matches_trl(seed, delta, token_level) -> None:
    advantages, logprobs, behaviour, mask = random_case(seed)
    if token_level:
        advantages = advantages[:, None] + torch.randn(mask.shape, generator=torch.Generator().manual_seed(seed)) * 0.5
    keep = off_policy_sequence_mask(advantages, logprobs, behaviour, mask, delta)
    trl_adv = advantages if token_level else advantages[:, None]
    expected = TRLGRPOLoss.get_off_policy_mask(trl_adv, logprobs, behaviour, mask.float(), delta)
    assert keep.tolist() == (expected.expand_as(mask).bool() & mask).tolist()


def test_the_random_cases_both_keep_and_drop() -> None:
    kept = dropped = 0
    for seed in range(8):
        advantages, logprobs, behaviour, mask = random_case(seed)
        keep = off_policy_sequence_mask(advantages, logprobs, behaviour, mask, 0.2)
        kept += int(keep.sum())
        dropped += int((mask & ~keep).sum())
    assert kept > 0 and dropped > 0
