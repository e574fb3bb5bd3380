"""The packed forward's causal attention in C (packed_attention.c), forward and backward.

Why: the packed forward (reinforge.learner.packed_forward) holds each distinct token once, but
`scaled_dot_product_attention` needs the padded [rows, T] layout, so every layer gathers queries,
keys and values into it, runs SDPA, and gathers the outputs back (and the backward scatters the
gradients the same way). At the lengths a small model's RL batch has (tens to a few hundred
tokens per row, head_dim 32-128) CPU SDPA also runs far below the machine's speed: its fixed cost
per (row, head) pair and its blocks sized for long sequences dominate. The C kernel reads the
packed tokens where they are, through each row's slot-to-token map, and does a row's attention
for all its queries in registers and a few kilobytes of scratch: the micro model's update 1.2x
and its reference forward 1.25x faster than with SDPA (`python benchmarks/packed_forward.py`).

`algo.packed_attention`: native (C; raises where it cannot be built), sdpa, or auto (C on CPU
float32 tensors with one torch thread, where a C compiler is found; SDPA spreads its work over
threads, the C loop does not). Built by reinforge.native_build on first use.
Numerics: the same softmax attention summed in another order, with exp from a polynomial of
relative error under 2e-7: outputs and gradients agree with SDPA to about 1e-6
(tests/learner/test_native_packed_attention.py).
"""

from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path

import torch

from reinforge.native_build import load_function, unavailable_reason

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("packed_attention.c")
MODES = ("auto", "sdpa", "native")
I64, PTR, F32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
FORWARD_ARGS = (PTR, PTR, PTR, PTR, I64, PTR, PTR, I64, PTR, PTR, I64, I64, I64, F32)
BACKWARD_ARGS = (PTR, PTR, PTR, PTR, PTR, PTR, PTR, I64, PTR, PTR, I64, PTR, PTR, PTR, I64, I64, I64, F32)


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"packed_attention must be one of {', '.join(MODES)}, not {mode!r}")


def wanted(mode: str) -> bool:
    """Whether `algo.packed_attention: mode` takes the C kernel where it can; "native" raises
    (with the compiler's message) when it cannot be built."""
    check_mode(mode)
    if mode == "native":
        load_function(SOURCE, "packed_attention_forward", *FORWARD_ARGS)
        return True
    if mode == "sdpa":
        return False
    reason = unavailable_reason(SOURCE)
    if reason is not None:
        _log_unavailable(reason)
    return reason is None


@functools.cache
def _log_unavailable(reason: str) -> None:
    logger.info("the packed forward attends through torch's SDPA: the C kernel is unavailable (%s)", reason)


def usable(q: torch.Tensor, mode: str) -> bool:
    """Whether a call with these queries can take the C kernel: CPU float32 (not under bf16
    autocast), and in auto mode one torch thread."""
    return q.device.type == "cpu" and q.dtype == torch.float32 and (mode == "native" or torch.get_num_threads() == 1)


class RowPlan:
    """The attention rows of a packing, as the kernel reads them (int64, contiguous).

    source [R, W]: the token (among the U) in each key slot of each row; first [R], length [R]:
    the row computes the tokens at its slots first .. length - 1, and has length real slots."""

    def __init__(self, source: torch.Tensor, first: torch.Tensor, length: torch.Tensor):
        self.source = source.to(torch.int64).contiguous()
        self.first = first.to(torch.int64).contiguous()
        self.length = length.to(torch.int64).contiguous()
        if not (self.source.shape[0] == self.first.shape[0] == self.length.shape[0]):
            raise ValueError("source, first and length must have one entry per row")


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: RowPlan, scale: float) -> torch.Tensor:
    """Causal attention of packed tokens: q [U, heads, d], k and v [U, kv_heads, d] -> [U, heads, d]
    (reinforge.learner.packed_attention.c says what each row attends); differentiable in q, k, v."""
    tensors = (q, k, v)
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors):  # the C loop reads raw float32 memory
        raise ValueError("packed_attention needs float32 CPU tensors")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2] or q.shape[1] % k.shape[1]:
        raise ValueError(f"packed_attention: q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not fit")
    return _PackedAttention.apply(q, k, v, plan, scale)


class _PackedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan: RowPlan, scale: float):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        tokens, heads, dim = q.shape
        out = q.new_zeros(tokens, heads, dim)  # zeros: a token no row computes (none in a packing) stays finite
        lse = q.new_zeros(tokens, heads)
        status = load_function(SOURCE, "packed_attention_forward", *FORWARD_ARGS)(
            q.data_ptr(), k.data_ptr(), v.data_ptr(),
            plan.source.data_ptr(), plan.source.shape[1], plan.first.data_ptr(), plan.length.data_ptr(), plan.source.shape[0],
            out.data_ptr(), lse.data_ptr(), heads, k.shape[1], dim, scale,
        )
        if status:
            raise MemoryError("packed_attention: out of memory for its scratch buffers")
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.plan, ctx.scale = plan, scale
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        plan = ctx.plan
        d_out = d_out.contiguous()
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        status = load_function(SOURCE, "packed_attention_backward", *BACKWARD_ARGS)(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), d_out.data_ptr(),
            plan.source.data_ptr(), plan.source.shape[1], plan.first.data_ptr(), plan.length.data_ptr(), plan.source.shape[0],
            dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), q.shape[1], k.shape[1], q.shape[2], ctx.scale,
        )
        if status:
            raise MemoryError("packed_attention: out of memory for its scratch buffers")
        return dq, dk, dv, None, None
