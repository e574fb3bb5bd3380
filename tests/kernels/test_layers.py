"""RMSNorm, SwiGLU and rotary in C (reinforge.kernels.layers) against transformers' and torch's,
forward and backward, and by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from reinforge.kernels.layers import rms_norm, rotary, swiglu
from float_bounds import EPS32


def grads_of(fn, *inputs: torch.Tensor, d_out: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out.backward(d_out)
    return out.detach(), [leaf.grad for leaf in leaves]


def test_rms_norm_matches_transformers() -> None:
    g = torch.Generator().manual_seed(0)
    hidden = 96
    module = LlamaRMSNorm(hidden, eps=1e-6)
    with torch.no_grad():
        module.weight.copy_(torch.rand(hidden, generator=g) + 0.5)
    x = torch.randn(37, 5, hidden, generator=g) * 3
    d_out = torch.randn(x.shape, generator=g)
    ours, (dx, dw) = grads_of(lambda a, w: rms_norm(a, w, module.variance_epsilon), x, module.weight, d_out=d_out)
    theirs, (dx_ref, dw_ref) = grads_of(lambda a, w: LlamaRMSNorm.forward(_with_weight(module, w), a), x, module.weight, d_out=d_out)
    # each output is a sum of `hidden` squares then a few products: ~(hidden + 8) u relative both
    # ways; the gradients sum over `hidden` (dx) or over the 185 rows (dw) the same way; x4 slack
    bound = 4 * (hidden + 8) * EPS32
    assert (ours - theirs).abs().max() <= bound * theirs.abs().max()
    assert (dx - dx_ref).abs().max() <= bound * dx_ref.abs().max()
    assert (dw - dw_ref).abs().max() <= 4 * (x.numel() // hidden + 8) * EPS32 * dw_ref.abs().max()


def _with_weight(module: LlamaRMSNorm, weight: torch.Tensor) -> LlamaRMSNorm:
    """The module with `weight` (a leaf whose gradient the test reads) in place of its own."""
    clone = LlamaRMSNorm(module.weight.shape[0], eps=module.variance_epsilon)
    del clone.weight
    clone.weight = weight
    return clone


def test_rms_norm_by_hand() -> None:
    # x = (3, 4): mean of squares 12.5, so y = w * x / sqrt(12.5)
    y = rms_norm(torch.tensor([[3.0, 4.0]]), torch.tensor([1.0, 2.0]), 0.0)
    assert y.tolist()[0] == pytest.approx([3 / math.sqrt(12.5), 8 / math.sqrt(12.5)], rel=1e-6)


def test_swiglu_matches_torch() -> None:
    g = torch.Generator().manual_seed(0)
    gate = torch.randn(41, 130, generator=g) * 4
    gate[0, :4] = torch.tensor([-100.0, 100.0, -88.0, 0.0])  # saturated sigmoid both ways, exp's underflow, 0
    up = torch.randn(41, 130, generator=g)
    d_out = torch.randn(gate.shape, generator=g)
    ours, (d_gate, d_up) = grads_of(swiglu, gate, up, d_out=d_out)
    theirs, (d_gate_ref, d_up_ref) = grads_of(lambda a, b: F.silu(a) * b, gate, up, d_out=d_out)
    # elementwise: a few roundings each, and the polynomial exp's 2e-7 relative; x4 slack, relative
    # to the size of each element's terms: d_gate = dy up s (1 + gate (1 - s)) cancels near
    # gate = -1.28, where its two terms are far larger than their sum
    s = torch.sigmoid(gate)
    gate_terms = (d_out * up).abs() * s * (1 + gate.abs() * (1 - s))
    for mine, ref, size in ((ours, theirs, theirs.abs()), (d_gate, d_gate_ref, gate_terms), (d_up, d_up_ref, d_up_ref.abs())):
        assert torch.isfinite(mine).all()
        assert ((mine - ref).abs() <= 4 * (8 * EPS32 + 2e-7) * (size + 1e-30)).all()


def test_swiglu_by_hand() -> None:
    # silu(0) = 0 and sigmoid(0) = 1/2: y = 0, d_up = 0, d_gate = dy * up * 1/2
    gate, up = torch.zeros(1, 1, requires_grad=True), torch.full((1, 1), 3.0, requires_grad=True)
    y = swiglu(gate, up)
    y.backward(torch.full((1, 1), 2.0))
    assert y.item() == 0 and up.grad.item() == 0 and gate.grad.item() == pytest.approx(3.0)


def test_refuse_bad_inputs() -> None:
    with pytest.raises(ValueError, match="float32 CPU"):
        swiglu(torch.zeros(2, 2, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="differ"):
        swiglu(torch.zeros(2, 2), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="does not fit"):
        rms_norm(torch.zeros(2, 4), torch.ones(3), 1e-6)


def test_rotary_matches_transformers() -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from reinforge.engines.llama_decoder import signed_sin

    g = torch.Generator().manual_seed(0)
    tokens, heads, dim = 29, 3, 16
    angles = torch.rand(tokens, dim // 2, generator=g) * 20
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
    x = torch.randn(tokens, heads, dim, generator=g)
    d_out = torch.randn(x.shape, generator=g)
    ours, (dx,) = grads_of(lambda a: rotary(a, cos[:, None], signed_sin(sin)[:, None]), x, d_out=d_out)

    def theirs_fn(a):  # transformers' [batch, heads, T, d] layout, one batch
        rotated, _ = apply_rotary_pos_emb(a.transpose(0, 1)[None], a.transpose(0, 1)[None], cos[None], sin[None])
        return rotated[0].transpose(0, 1)

    theirs, (dx_ref,) = grads_of(theirs_fn, x, d_out=d_out)
    # two products and a sum per element, the same roundings in the same order: equal to a few ulps
    assert (ours - theirs).abs().max() <= 4 * EPS32 * theirs.abs().max()
    assert (dx - dx_ref).abs().max() <= 4 * EPS32 * dx_ref.abs().max()


def test_rotary_by_hand() -> None:
    # d = 2: (x0, x1) turns by the angle a: (x0 cos a - x1 sin a, x1 cos a + x0 sin a)
    a = torch.tensor(0.5)
    cos, signed = torch.stack([a.cos(), a.cos()])[None], torch.stack([-a.sin(), a.sin()])[None]
    y = rotary(torch.tensor([[[1.0, 2.0]]]), cos, signed)
    assert y[0, 0].tolist() == pytest.approx([(a.cos() - 2 * a.sin()).item(), (2 * a.cos() + a.sin()).item()], rel=1e-6)


def test_inference_entry_points_match_the_autograd_ones_and_check_layouts() -> None:
    from reinforge.kernels.layers import rms_norm_rows, rotary_rows, swiglu_halves

    g = torch.Generator().manual_seed(0)
    x, weight = torch.randn(6, 16, generator=g), torch.rand(16, generator=g)
    assert torch.equal(rms_norm_rows(x, weight, 1e-6), rms_norm(x, weight, 1e-6))
    gate_up = torch.randn(6, 20, generator=g)
    assert torch.equal(swiglu_halves(gate_up), swiglu(gate_up[:, :10].contiguous(), gate_up[:, 10:].contiguous()))
    qkv = torch.randn(6, 3 * 2 * 8, generator=g)  # q | k | v of 2 heads of 8: rotate the first 4 heads
    table = torch.randn(6, 16, generator=g)  # cos | sin side by side, as the decoder tabulates them
    cos, sin = table[:, None, :8], table[:, None, 8:]
    expected = rotary(qkv[:, :32].reshape(6, 4, 8), cos, sin)
    assert torch.equal(rotary_rows(qkv, 4, 8, cos, sin), expected)
    with pytest.raises(ValueError, match="do not fit"):
        rotary_rows(qkv, 7, 8, cos, sin)  # 56 values per row, 48 there
    with pytest.raises(ValueError, match="contiguous"):
        rms_norm_rows(x.t(), weight, 1e-6)
    with pytest.raises(ValueError, match="2 I"):
        swiglu_halves(gate_up[:, :9])
