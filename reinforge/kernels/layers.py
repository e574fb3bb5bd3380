"""RMSNorm, SwiGLU and rotary embedding in C (layers.c): forward and backward for the packed
forward, and inference-only entry points for the engine's decode step.

Why: in eager PyTorch each of them is several elementwise ops, and each op reads and writes the
whole activation again, in forward and again in backward: transformers' RMSNorm is six ops
(pow, mean, add, rsqrt, two muls), SiLU x up two forward and three backward, over [tokens, 4 x
hidden] tensors that do not fit in the cache, and the rotary embedding four (two muls, a roll, an add). On a CPU, where the update of a small model is bound
by memory traffic around its matmuls, that is a large part of it. Here each is one pass forward
and one backward. The projections stay the model's own modules (LoRA adapters work); only the
norm's formula and the activation between the projections are computed here, for the model types
the packed forward supports (RMSNorm with `weight` and `variance_epsilon`, SiLU).

Used by reinforge.learner.packed_forward and reinforge.engines.llama_decoder when
`algo.packed_kernels` / `engine.decode_kernels` take the C kernels (reinforge.kernels.choice);
built by reinforge.kernels.build. In a decode step (64 rows) the fixed cost of torch's ops is
what they save: RMSNorm is nine dispatches there.
Numerics: the same formulas summed in another order, sigmoid from a polynomial exp of relative
error under 2e-7: agree with torch to about 1e-6 (tests/kernels/test_layers.py).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from reinforge.kernels.build import load_function

SOURCE = Path(__file__).with_suffix(".c")
I64, PTR, F32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
SIGNATURES = {
    "rms_norm_forward": (PTR, PTR, PTR, PTR, I64, I64, F32),
    "rms_norm_backward": (PTR, PTR, PTR, PTR, PTR, PTR, I64, I64),
    "swiglu_forward": (PTR, PTR, I64, PTR, I64, I64),
    "swiglu_backward": (PTR, PTR, PTR, PTR, PTR, I64),
    "rotary": (PTR, I64, PTR, PTR, I64, PTR, I64, I64, I64, ctypes.c_int),
}


def _call(name: str, *args) -> None:
    if load_function(SOURCE, name, *SIGNATURES[name])(*args):
        raise MemoryError(f"{name}: out of memory for its scratch buffer")


def _float32_cpu(*tensors: torch.Tensor) -> None:
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors):  # the C loops read raw float32 memory
        raise ValueError("the C layer kernels need float32 CPU tensors")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2, last dim) + eps): x [..., H], weight [H]; differentiable in both."""
    _float32_cpu(x, weight)
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"rms_norm: weight {tuple(weight.shape)} does not fit x {tuple(x.shape)}")
    return _RMSNorm.apply(x, weight, eps)


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, elementwise; differentiable in both."""
    _float32_cpu(gate, up)
    if gate.shape != up.shape:
        raise ValueError(f"swiglu: gate {tuple(gate.shape)} and up {tuple(up.shape)} differ")
    return _SwiGLU.apply(gate, up)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, heads, d] rotated by position: x cos + roll(x, d/2) sin, with cos and the signed sin
    (reinforge.engines.rotary.signed_sin) [T, 1, d] or [T, d]; differentiable in x."""
    _float32_cpu(x, cos, sin)
    tokens, _, dim = x.shape
    cos, sin = cos.reshape(tokens, -1), sin.reshape(tokens, -1)
    if cos.shape != (tokens, dim) or sin.shape != (tokens, dim) or dim % 2:
        raise ValueError(f"rotary: x {tuple(x.shape)} needs an even head size and cos, sin of [{tokens}, {dim}]")
    return _Rotary.apply(x, cos.contiguous(), sin.contiguous())


def rms_norm_values(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`rms_norm`'s output without autograd: the same kernel on the same numbers, so the same bits
    (what reinforge.learner.rebuilt_activations rebuilds in the backward instead of keeping it)."""
    return _rms_norm_forward(x.contiguous(), weight.contiguous(), eps)[0]


def swiglu_values(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """`swiglu`'s output without autograd (same kernel, same bits); gate and up of one shape."""
    gate, up = gate.contiguous(), up.contiguous()
    y = torch.empty_like(gate)
    cols = gate.shape[-1]
    _call("swiglu_forward", gate.data_ptr(), up.data_ptr(), cols, y.data_ptr(), gate.numel() // cols, cols)
    return y


def _rms_norm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """y and the per-row 1 / rms of contiguous x [..., H]."""
    hidden = x.shape[-1]
    rows = x.numel() // hidden
    y = torch.empty_like(x)
    inv_rms = x.new_empty(rows)
    _call("rms_norm_forward", x.data_ptr(), weight.data_ptr(), y.data_ptr(), inv_rms.data_ptr(), rows, hidden, eps)
    return y, inv_rms


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps: float):
        x, weight = x.contiguous(), weight.contiguous()
        y, inv_rms = _rms_norm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, inv_rms)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, inv_rms = ctx.saved_tensors
        dy = dy.contiguous()
        dx, dw = torch.empty_like(x), torch.empty_like(weight)
        _call("rms_norm_backward", x.data_ptr(), weight.data_ptr(), inv_rms.data_ptr(), dy.data_ptr(), dx.data_ptr(),
              dw.data_ptr(), inv_rms.shape[0], x.shape[-1])
        return dx, dw if ctx.needs_input_grad[1] else None, None


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        gate, up = gate.contiguous(), up.contiguous()
        ctx.save_for_backward(gate, up)
        return swiglu_values(gate, up)

    @staticmethod
    def backward(ctx, dy):
        gate, up = ctx.saved_tensors
        dy = dy.contiguous()
        d_gate, d_up = torch.empty_like(gate), torch.empty_like(up)
        _call("swiglu_backward", gate.data_ptr(), up.data_ptr(), dy.data_ptr(), d_gate.data_ptr(), d_up.data_ptr(), gate.numel())
        return d_gate, d_up


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, transpose: int) -> torch.Tensor:
    """x [T, heads, d] rotated by cos, sin [T, d] (contiguous); transpose = 1: the inverse rotation."""
    x = x.contiguous()
    y = torch.empty_like(x)
    tokens, heads, dim = x.shape
    _call("rotary", x.data_ptr(), heads * dim, cos.data_ptr(), sin.data_ptr(), dim, y.data_ptr(), tokens, heads, dim, transpose)
    return y


class _Rotary(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin, 0)

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        return _rotate(dy, cos, sin, 1), None, None


# Inference only (the engine's decode step, under inference_mode): the same kernels without the
# autograd bookkeeping, on the layouts the fused decoder has (reinforge.engines.llama_decoder).


def rms_norm_rows(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """`rms_norm` of contiguous float32 rows x [N, H], no gradient."""
    _float32_cpu(x, weight)
    if not x.is_contiguous() or x.dim() != 2 or weight.shape != x.shape[1:]:
        raise ValueError(f"rms_norm_rows: x {tuple(x.shape)} must be contiguous [N, H], weight [H]")
    y = torch.empty_like(x)
    inv_rms = x.new_empty(x.shape[0])
    _call("rms_norm_forward", x.data_ptr(), weight.data_ptr(), y.data_ptr(), inv_rms.data_ptr(), x.shape[0], x.shape[1], eps)
    return y


def rotary_rows(x: torch.Tensor, heads: int, dim: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The first `heads` x `dim` values of each row of x [N, >= heads x dim] (unit last stride),
    rotated as `rotary` does -> [N, heads, dim]; cos, sin [N, 1, dim] or [N, dim] with unit last
    stride (views of one table are fine), no gradient."""
    tokens = x.shape[0]
    _float32_cpu(x, cos, sin)
    fits = x.shape[1] >= heads * dim and cos.shape[0] == sin.shape[0] == tokens and cos.shape[-1] == sin.shape[-1] == dim
    if not fits or cos.stride() != sin.stride() or x.stride(-1) != 1 or cos.stride(-1) != 1:
        raise ValueError(f"rotary_rows: x {tuple(x.shape)}, cos {tuple(cos.shape)} do not fit {heads} heads of {dim}")
    y = x.new_empty(tokens, heads, dim)
    _call("rotary", x.data_ptr(), x.stride(0), cos.data_ptr(), sin.data_ptr(), cos.stride(0), y.data_ptr(), tokens, heads, dim, 0)
    return y


def swiglu_halves(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of gate_up [N, 2 I] = [gate | up] (one projection), no gradient -> [N, I]."""
    rows, cols = gate_up.shape[0], gate_up.shape[1] // 2
    _float32_cpu(gate_up)
    if gate_up.dim() != 2 or gate_up.shape[1] % 2 or gate_up.stride(-1) != 1:
        raise ValueError(f"swiglu_halves: gate_up {tuple(gate_up.shape)} must be [N, 2 I] with unit last stride")
    y = gate_up.new_empty(rows, cols)
    _call("swiglu_forward", gate_up.data_ptr(), gate_up.data_ptr() + 4 * cols, gate_up.stride(0), y.data_ptr(), rows, cols)
    return y
