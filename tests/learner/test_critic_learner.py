"""CriticLearner: masked values, micro-batch invariance, validation, and fitting fixed returns."""

from __future__ import annotations

import copy

import pytest
import torch

from reinforge.algos.losses.value import hl_gauss_targets
from reinforge.learner.batch import TrainingBatch
from reinforge.learner.critic_learner import CriticLearner
from reinforge.models.value_model import ValueModel
from float_bounds import assert_within, forward_bound, gradient_bound, network_sizes


def make_batch(tokenizer) -> TrainingBatch:
    """Three right-padded rows of different lengths: a prompt, then sampled answer tokens."""
    rows = [("12+34=", "46"), ("7+8=", "15"), ("123+456=", "579")]
    sequences, prompt_lengths = [], []
    for prompt, answer in rows:
        prompt_ids = tokenizer(prompt).input_ids
        answer_ids = tokenizer(answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        sequences.append(prompt_ids + answer_ids)
        prompt_lengths.append(len(prompt_ids))
    width = max(map(len, sequences))
    input_ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    attention_mask = torch.zeros(len(rows), width, dtype=torch.long)
    loss_mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, (seq, p) in enumerate(zip(sequences, prompt_lengths)):
        input_ids[i, : len(seq)] = torch.tensor(seq)
        attention_mask[i, : len(seq)] = 1
        loss_mask[i, p : len(seq)] = True
    return TrainingBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask[:, 1:],
        old_logprobs=torch.zeros(len(rows), width - 1),
        advantages=torch.zeros(len(rows)),
    )


def fixed_returns(batch: TrainingBatch) -> torch.Tensor:
    """Return 1 on every sampled token of row 0, 0 on row 1, 0.5 on row 2."""
    return torch.tensor([1.0, 0.0, 0.5])[:, None] * batch.loss_mask


def test_values_are_masked_and_micro_batch_independent(tokenizer) -> None:
    torch.manual_seed(0)
    model = ValueModel.from_config(tokenizer, "nano")
    torch.nn.init.normal_(model.head.weight)
    batch = make_batch(tokenizer)
    values = CriticLearner(model, lr=1e-3, micro_batch_size=3).values(batch)
    assert values.shape == batch.loss_mask.shape
    assert (values[~batch.loss_mask] == 0).all() and (values[batch.loss_mask] != 0).all()
    # Other batch shapes add in another order: equal up to float32 noise (tests/float_bounds.py).
    noise = forward_bound(model.trunk, scale=values.abs().max().item())
    assert_within(CriticLearner(model, lr=1e-3, micro_batch_size=1).values(batch), values, noise, "values")
    expected = model.eval()(batch.input_ids, batch.attention_mask) * batch.loss_mask
    assert_within(values, expected, noise, "values")


@pytest.mark.parametrize("loss", ["mse", "hl_gauss"])
def test_micro_batches_add_up_to_the_full_batch(tokenizer, loss) -> None:
    num_bins = 11 if loss == "hl_gauss" else None
    model = ValueModel.from_config(tokenizer, "nano", num_bins=num_bins)
    torch.nn.init.normal_(model.head.weight, std=0.1)
    batch = make_batch(tokenizer)
    returns = fixed_returns(batch)
    learners = [CriticLearner(copy.deepcopy(model), lr=1e-2, micro_batch_size=m, loss=loss) for m in (3, 1)]
    old_values = learners[0].values(batch) + 0.3 * batch.loss_mask  # so the mse clip is active somewhere
    metrics = [learner.train_step(batch, returns, old_values) for learner in learners]
    for key in metrics[0]:
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-4, abs=1e-6), key
    if loss == "mse":
        assert 0 < metrics[0]["value_clip_frac"] < 1
    # Same accumulated gradient up to float32 noise (Adam's first step, ~lr * sign(g), would amplify
    # it, so the weights are not compared).
    layers, _ = network_sizes(model.trunk)
    tokens = int(batch.loss_mask.sum())
    for (name, a), b in zip(learners[0].model.named_parameters(), learners[1].model.parameters()):
        assert_within(a.grad, b.grad, gradient_bound(a.grad, tokens, layers + 1), name)


def test_loss_and_model_must_agree(tokenizer) -> None:
    scalar = ValueModel.from_config(tokenizer, "nano")
    binned = ValueModel.from_config(tokenizer, "nano", num_bins=11, support=(0.0, 1.0))
    with pytest.raises(ValueError, match="num_bins"):
        CriticLearner(scalar, lr=1e-3, loss="hl_gauss")
    with pytest.raises(ValueError, match="scalar head"):
        CriticLearner(binned, lr=1e-3, loss="mse")
    with pytest.raises(ValueError, match="support"):
        CriticLearner(binned, lr=1e-3, loss="hl_gauss")  # default support (-1.0, 1.5)
    with pytest.raises(ValueError, match="valid: hl_gauss, mse"):
        CriticLearner(scalar, lr=1e-3, loss="l1")
    batch = make_batch(tokenizer)
    with pytest.raises(ValueError, match="must match loss_mask"):
        CriticLearner(scalar, lr=1e-3).train_step(batch, torch.zeros(3, 2), torch.zeros(3, 2))


@pytest.mark.parametrize("loss", ["mse", "hl_gauss"])
def test_critic_fits_fixed_returns(tokenizer, loss) -> None:
    torch.manual_seed(0)
    support = (-1.0, 1.5)
    model = ValueModel.from_config(tokenizer, "nano", num_bins=51 if loss == "hl_gauss" else None, support=support)
    learner = CriticLearner(model, lr=3e-3, micro_batch_size=2, loss=loss, clip_eps=0.2, support=support)
    batch = make_batch(tokenizer)
    returns = fixed_returns(batch)
    mask = batch.loss_mask

    def value_error() -> float:
        return (((learner.values(batch) - returns) ** 2) * mask).sum().item() / mask.sum().item()

    # The cross-entropy cannot go below the entropy of the HL-Gauss targets: measure the excess.
    floor = 0.0
    if loss == "hl_gauss":
        targets = hl_gauss_targets(returns, *support, 51)
        floor = (-torch.special.xlogy(targets, targets).sum(-1) * mask).sum().item() / mask.sum().item()

    start_error = value_error()
    losses = []
    for _ in range(40):  # converges in ~30 steps at this lr; kept short for the 2-core CI budget
        # As in PPO, old values are the critic's own values when the batch was scored: refresh them.
        metrics = learner.train_step(batch, returns, old_values=learner.values(batch))
        losses.append(metrics["value_loss"] - floor)
    assert losses[-1] <= 0.2 * losses[0], (losses[0], losses[-1])
    assert value_error() <= 0.2 * start_error, (start_error, value_error())
    assert metrics["explained_variance"] > 0.8
