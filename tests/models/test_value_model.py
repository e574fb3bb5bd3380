"""ValueModel: alignment with TrainingBatch, causality, padding, bins, from_policy and save/load."""

from __future__ import annotations

import torch

from reinforge.algos.losses.value import hl_gauss_bin_centers
from reinforge.models.value_model import ValueModel
from float_bounds import forward_bound


def random_head_(model: ValueModel, seed: int = 0) -> ValueModel:
    """The head starts at zero (constant values); give it weights so values depend on the input."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.head.weight.copy_(torch.randn(model.head.weight.shape, generator=generator))
        model.head.bias.copy_(torch.randn(model.head.bias.shape, generator=generator))
    return model.eval()


def ids_of(tokenizer, text: str) -> torch.Tensor:
    return torch.tensor([tokenizer(text).input_ids])


def test_from_policy_shapes_initial_values_and_independent_trunk(nano_model, tokenizer) -> None:
    ids = torch.cat([ids_of(tokenizer, "12+34=46"), ids_of(tokenizer, "98+76=17")])
    mask = torch.ones_like(ids)
    scalar = ValueModel.from_policy(nano_model).eval()
    values = scalar(ids, mask)
    assert values.shape == (2, ids.shape[1] - 1) and values.dtype == torch.float32
    assert torch.equal(values, torch.zeros_like(values))  # zero head
    # The trunk is a copy of the policy's base model: same features, separate parameters.
    with torch.no_grad():
        expected = nano_model.model(input_ids=ids, attention_mask=mask).last_hidden_state
        assert torch.allclose(scalar.trunk(input_ids=ids, attention_mask=mask).last_hidden_state, expected)
    policy_params = {p.data_ptr() for p in nano_model.parameters()}
    assert not any(p.data_ptr() in policy_params for p in scalar.parameters())

    binned = ValueModel.from_policy(nano_model, num_bins=11, support=(-1.0, 1.5)).eval()
    logits = binned.logits(ids, mask)
    assert logits.shape == (2, ids.shape[1] - 1, 11)
    # Uniform histogram: the value is the mean of the bin centers, (-1 + 1.5) / 2.
    assert torch.allclose(binned(ids, mask), torch.full((2, ids.shape[1] - 1), 0.25), atol=1e-6)
    assert torch.allclose(binned.bin_centers, hl_gauss_bin_centers(-1.0, 1.5, 11))


def test_value_at_t_is_the_state_after_tokens_0_to_t(nano_model, tokenizer) -> None:
    model = random_head_(ValueModel.from_policy(nano_model))
    ids = ids_of(tokenizer, "123+456=579")
    full = model(ids, torch.ones_like(ids))
    for t in range(ids.shape[1] - 1):
        prefix = ids[:, : t + 1]
        hidden = model.trunk(input_ids=prefix, attention_mask=torch.ones_like(prefix)).last_hidden_state[:, -1]
        # A prefix forward adds in another order than the full one: float32 noise (tests/float_bounds.py).
        assert torch.allclose(full[0, t], model.head(hidden)[0, 0], atol=forward_bound(model.trunk, full.abs().max().item()), rtol=0), t


def test_values_are_causal(nano_model, tokenizer) -> None:
    model = random_head_(ValueModel.from_policy(nano_model, num_bins=7))
    ids = ids_of(tokenizer, "123+456=579")
    mask = torch.ones_like(ids)
    base = model(ids, mask)
    for k in range(1, ids.shape[1]):
        changed = ids.clone()
        changed[0, k] = ids[0, k] % (len(tokenizer) - 1) + 1  # any other token
        values = model(changed, mask)
        # Index t sees tokens 0..t: indices < k are untouched, index k is the first to see the change.
        assert torch.equal(values[:, :k], base[:, :k]), k
        if k < ids.shape[1] - 1:
            assert not torch.allclose(values[:, k], base[:, k]), k


def test_right_padding_does_not_change_values(nano_model, tokenizer) -> None:
    model = random_head_(ValueModel.from_policy(nano_model))
    short, long = ids_of(tokenizer, "1+2=3"), ids_of(tokenizer, "123+456=579")
    n = short.shape[1]
    padded = torch.full_like(long, tokenizer.pad_token_id)
    padded[0, :n] = short[0]
    batch = torch.cat([padded, long])
    mask = torch.ones_like(batch)
    mask[0, n:] = 0
    values = model(batch, mask)
    noise = forward_bound(model.trunk, values.abs().max().item())  # batch vs alone: float32 noise only
    assert torch.allclose(values[0, : n - 1], model(short, torch.ones_like(short))[0], atol=noise, rtol=0)
    assert torch.allclose(values[1], model(long, torch.ones_like(long))[0], atol=noise, rtol=0)


def test_save_load_round_trip(nano_model, tokenizer, tmp_path) -> None:
    ids = torch.cat([ids_of(tokenizer, "12+34=46"), ids_of(tokenizer, "98+76=17")])
    mask = torch.ones_like(ids)
    for num_bins in (None, 9):
        model = random_head_(ValueModel.from_policy(nano_model, num_bins=num_bins, support=(-2.0, 3.0)))
        directory = model.save_pretrained(tmp_path / f"critic-{num_bins}")
        loaded = ValueModel.load(directory).eval()
        assert loaded.num_bins == num_bins and loaded.support == (-2.0, 3.0)
        assert torch.equal(loaded(ids, mask), model(ids, mask))


def test_from_config_builds_a_separate_tiny_trunk(tokenizer) -> None:
    model = ValueModel.from_config(tokenizer, "nano", num_bins=5, seed=1)
    ids = ids_of(tokenizer, "1+2=3")
    assert model(ids, torch.ones_like(ids)).shape == (1, ids.shape[1] - 1)
    assert model.trunk.config.hidden_size == 64
