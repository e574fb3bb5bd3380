"""The prompt-value model learns a known pass-rate function from group outcomes alone."""

from __future__ import annotations

import copy

import torch

from reinforge.values.value_model import PromptValueModel


def true_pass_rate(x: torch.Tensor) -> torch.Tensor:
    # Depends on the direction of the embedding (the model L2-normalizes it): easy on one side, hard on the other.
    x = torch.nn.functional.normalize(x, dim=1)
    return torch.sigmoid(6 * x[:, 0] - 2 * x[:, 1])


def test_learns_a_known_pass_rate_function_from_groups_of_four():
    torch.manual_seed(0)
    model = PromptValueModel(embed_dim=6, hidden=32, lr=1e-2, updates_per_step=20, buffer_groups=512, memory_groups=64, seed=0)
    gen = torch.Generator().manual_seed(1)
    for _ in range(30):  # 30 "RL steps" of 32 prompts x 4 samples
        x = torch.randn(32, 6, generator=gen)
        predicted, summaries = model.predict(x)
        rates = (torch.rand(32, 4, generator=gen) < true_pass_rate(x)[:, None]).double().mean(1)
        model.observe(x, summaries, predicted, rates, torch.full((32,), 4))
        model.fit()
    x = torch.randn(2000, 6, generator=gen)
    truth = true_pass_rate(x).double()
    predicted, _ = model.predict(x)
    error = (predicted - truth).pow(2).mean().item()
    constant = (truth.mean() - truth).pow(2).mean().item()  # the best constant predictor: the mean pass rate
    assert error < 0.2 * constant, (error, constant)
    assert error < 0.012
    # The prior's error variance it reports is of the same order as its real error (not the 0.25 of no data).
    assert model.prior_variance(floor=1e-4) < 0.05


def test_state_dict_round_trip_predicts_identically():
    a = PromptValueModel(embed_dim=4, seed=3)
    x = torch.randn(8, 4)
    p, s = a.predict(x)
    a.observe(x, s, p, torch.rand(8), torch.full((8,), 4))
    a.fit()
    b = PromptValueModel(embed_dim=4, seed=99)
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as through torch.save / torch.load: no shared tensors
    assert torch.equal(a.predict(x)[0], b.predict(x)[0])
    a.fit()
    b.fit()  # same optimizer state, same generator: the same next update
    assert torch.equal(a.predict(x)[0], b.predict(x)[0])
