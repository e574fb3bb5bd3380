"""The packed forward's causal attention in C (packed_attention.c), forward and backward.

Why: the packed forward (reinforge.learner.packed_forward) holds each distinct token once, but
`scaled_dot_product_attention` needs the padded [rows, T] layout, so every layer gathers queries,
keys and values into it, runs SDPA, and gathers the outputs back (and the backward scatters the
gradients the same way). At the lengths a small model's RL batch has (tens to a few hundred
tokens per row, head_dim 32-128) CPU SDPA also runs far below the machine's speed: its fixed cost
per (row, head) pair and its blocks sized for long sequences dominate. The C kernel reads the
packed tokens where they are, through each row's slot-to-token map, and does a row's attention
for blocks of 4 queries at a time in registers and a few kilobytes of scratch: on the micro
model's 8 x 8 batch, one layer's attention takes 3 ms forward and 4.4 ms backward against 7-12 and
16-18 ms through SDPA and its gathers.

Used when `algo.packed_kernels` takes the C kernels (reinforge.kernels.choice); built by
reinforge.kernels.build on first use.
Numerics: the same softmax attention summed in another order, with exp from a polynomial of
relative error under 2e-7: outputs and gradients agree with SDPA to about 1e-6
(tests/kernels/test_packed_attention.py).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from reinforge.kernels.build import load_function

SOURCE = Path(__file__).with_suffix(".c")
I64, PTR, F32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
FORWARD_ARGS = (PTR, PTR, PTR, PTR, I64, PTR, PTR, I64, PTR, PTR, I64, I64, I64, F32)
BACKWARD_ARGS = (PTR, PTR, PTR, PTR, PTR, PTR, PTR, I64, PTR, PTR, I64, PTR, PTR, PTR, I64, I64, I64, F32)


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
        if len(self.first) and not (0 <= self.first.min() and (self.first <= self.length).all() and self.length.max() <= self.source.shape[1]):
            raise ValueError("each row needs 0 <= first <= length <= its slots")  # the C loops index with them
        self.computed = int((self.length - self.first).sum())  # tokens the rows compute: each exactly once


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: RowPlan, scale: float) -> torch.Tensor:
    """Causal attention of packed tokens: q [U, heads, d], k and v [U, kv_heads, d] -> [U, heads, d]
    (packed_attention.c says what each row attends); differentiable in q, k, v."""
    tensors = (q, k, v)
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors):  # the C loop reads raw float32 memory
        raise ValueError("packed_attention needs float32 CPU tensors")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[2] != k.shape[2] or q.shape[1] % k.shape[1]:
        raise ValueError(f"packed_attention: q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not fit")
    if plan.computed != q.shape[0]:  # the kernel writes each token's output once, by the row that computes it
        raise ValueError(f"packed_attention: the rows compute {plan.computed} tokens, q has {q.shape[0]}")
    if plan.source.numel() and not (0 <= plan.source.min() and plan.source.max() < q.shape[0]):
        raise ValueError(f"packed_attention: slots name tokens outside 0..{q.shape[0] - 1}")  # raw memory reads
    return _PackedAttention.apply(q, k, v, plan, scale)


class _PackedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plan: RowPlan, scale: float):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        tokens, heads, dim = q.shape
        out, lse = q.new_empty(tokens, heads, dim), q.new_empty(tokens, heads)  # every token is written once
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
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)  # dq: written once per token
        status = load_function(SOURCE, "packed_attention_backward", *BACKWARD_ARGS)(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), d_out.data_ptr(),
            plan.source.data_ptr(), plan.source.shape[1], plan.first.data_ptr(), plan.length.data_ptr(), plan.source.shape[0],
            dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), q.shape[1], k.shape[1], q.shape[2], ctx.scale,
        )
        if status:
            raise MemoryError("packed_attention: out of memory for its scratch buffers")
        return dq, dk, dv, None, None
