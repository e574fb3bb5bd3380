"""The C decode attention (reinforge.kernels.decode_attention) against torch's SDPA, and the engine
its fallback, and the engine sampling through it."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

from reinforge.kernels import build as native_build
from reinforge.kernels import decode_attention as kernel
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from float_bounds import EPS32, forward_bound


def sdpa(q, keys, values, key_bias, length, scale=None):
    return F.scaled_dot_product_attention(
        q.unsqueeze(2), keys[:, :, :length], values[:, :, :length], attn_mask=key_bias[..., :length],
        enable_gqa=keys.shape[1] != q.shape[1], scale=scale,
    )[:, :, 0]


def attention_bound(values: torch.Tensor, length: int) -> float:
    """The output is a convex combination of `length` values: each order of summation errs by at
    most ~length * u of the largest |value| (the scores' rounding moves the weights by a relative
    ~(head_dim + length) * u, times |value| again), and exp's polynomial by 2e-7 relative; x4 slack."""
    return 4 * (2 * length + values.shape[-1] + 2e-7 / EPS32) * EPS32 * values.abs().max().item()


def cache(rows, kv_heads, slots, dim, pads, seed=0):
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(rows, kv_heads, slots, dim, generator=g) * 2
    values = torch.randn(rows, kv_heads, slots, dim, generator=g)
    key_bias = torch.zeros(rows, 1, 1, slots)
    for row, n in enumerate(pads):  # left pads: masked, as a prompt's pads are
        key_bias[row, ..., :n] = float("-inf")
    return keys, values, key_bias


@pytest.mark.parametrize("heads,kv_heads,dim", [(4, 4, 32), (8, 2, 64), (9, 3, 64), (4, 1, 17), (6, 3, 128)])
def test_kernel_matches_sdpa(heads, kv_heads, dim) -> None:
    rows, slots, length = 5, 40, 29  # the used slots are a strided slice of a longer cache
    keys, values, key_bias = cache(rows, kv_heads, slots, dim, pads=[0, 3, 7, 1, 28])
    # q as the decoder makes it: the first heads of a [rows, heads + kv_heads, dim] tensor
    q = torch.randn(rows, heads + kv_heads, dim, generator=torch.Generator().manual_seed(1))[:, :heads] * 2
    ours = kernel.decode_attention(q, keys, values, key_bias, length)
    expected = sdpa(q, keys, values, key_bias, length)
    assert ours.shape == (rows, heads, dim)
    gap = (ours - expected).abs().max().item()
    assert gap < attention_bound(values[:, :, :length], length), gap
    # a wrong head-to-kv-head map, slot or mask moves the output by O(1), far above the bound
    assert attention_bound(values[:, :, :length], length) < 1e-3


def test_the_scale_is_the_callers() -> None:
    """An attention module's own `scaling` (not always 1 / sqrt(head_dim)) reaches the kernel."""
    keys, values, key_bias = cache(3, 3, 20, 64, pads=[0, 5, 2])
    q = torch.randn(3, 9, 64, generator=torch.Generator().manual_seed(2))
    ours = kernel.decode_attention(q, keys, values, key_bias, 20, scale=0.05)
    bound = attention_bound(values, 20)
    assert (ours - sdpa(q, keys, values, key_bias, 20, scale=0.05)).abs().max().item() < bound
    assert (ours - sdpa(q, keys, values, key_bias, 20)).abs().max().item() > 100 * bound


def test_masked_slots_get_no_weight() -> None:
    keys, values, key_bias = cache(3, 2, 12, 16, pads=[4, 0, 11])
    poisoned = values.clone()
    poisoned[0, :, :4] = 1e30  # masked slots of row 0 (and of row 2, below) with absurd values
    poisoned[2, :, :11] = -1e30
    q = torch.randn(3, 2, 16)
    ours = kernel.decode_attention(q, keys, poisoned, key_bias, 12)
    assert torch.isfinite(ours).all()
    assert torch.allclose(ours, kernel.decode_attention(q, keys, values, key_bias, 12))
    # row 2 attends one slot only: its output is that slot's value
    assert torch.allclose(ours[2], values[2, :, 11], atol=1e-6)


def test_wrong_layouts_are_refused() -> None:
    keys, values, key_bias = cache(2, 2, 8, 16, pads=[0, 0])
    q = torch.randn(2, 4, 16)
    with pytest.raises(ValueError, match="same shape and strides"):
        kernel.decode_attention(q, keys, values[:, :, :4], key_bias, 4)
    with pytest.raises(ValueError, match="outside the cache"):
        kernel.decode_attention(q, keys, values, key_bias, 9)
    with pytest.raises(ValueError, match="divisible"):
        kernel.decode_attention(torch.randn(2, 3, 16), keys, values, key_bias, 4)
    with pytest.raises(ValueError, match="float32 CPU"):
        kernel.decode_attention(q.double(), keys, values, key_bias, 4)


def test_without_a_compiler_the_engine_samples_through_torch(broken_compiler, nano_model, tokenizer) -> None:
    engine = TorchEngine(nano_model, tokenizer.pad_token_id)  # auto: torch's ops
    prompt = tokenizer("12+7=").input_ids
    assert len(engine.generate([prompt], SamplingParams(max_new_tokens=3, temperature=0.0))[0].token_ids) == 3
    assert not engine._get_decoder().native
    with pytest.raises(native_build.NativeCodeUnavailable, match="false failed on decode_attention.c"):
        TorchEngine(nano_model, tokenizer.pad_token_id, decode_kernels="native")._get_decoder()
    assert list(broken_compiler.iterdir()) == []


def test_bad_mode_is_refused_at_construction(nano_model, tokenizer) -> None:
    with pytest.raises(ValueError, match="engine.decode_kernels must be one of auto, torch, native"):
        TorchEngine(nano_model, tokenizer.pad_token_id, decode_kernels="c")


def test_engine_samples_the_same_through_either_kernels(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    """Same seed: the same tokens, log-probs within float rounding, through stops and row drops
    (C attention, RMSNorm, rotary and SwiGLU against torch's)."""
    params = SamplingParams(max_new_tokens=12, temperature=1.0, stop_token_ids=[tokenizer.eos_token_id, 9])
    runs = {}
    for mode in ("torch", "native"):
        engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id, decode_kernels=mode)
        runs[mode] = engine.generate(arithmetic_prompts * 2, params, seed=3)
        assert engine._get_decoder().native == (mode == "native")
    assert {g.finish_reason for g in runs["native"]} == {"stop", "length"}  # rows dropped mid-rollout
    lengths = [len(g.token_ids) for g in runs["native"]]
    assert min(lengths) < max(lengths)
    bound = forward_bound(sharp_nano_model, max(abs(x) for g in runs["torch"] for x in g.logprobs))
    for a, b in zip(runs["torch"], runs["native"]):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < bound


def test_config_reaches_the_engine(nano_model, tokenizer) -> None:
    from reinforge.config import load_config
    from reinforge.run.pipeline import build_engine

    cfg = load_config("default", ["engine.decode_kernels=torch"])
    assert load_config("default").engine.decode_kernels == "auto"
    assert build_engine(cfg, nano_model, tokenizer.pad_token_id).decode_kernels == "torch"
    with pytest.raises(Exception, match="decode_kernels"):
        load_config("default", ["engine.decode_kernels=fast"])
