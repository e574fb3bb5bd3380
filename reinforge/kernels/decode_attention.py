"""Decode attention in C (decode_attention.c), compiled on first use for this machine's CPU.

Why: at a decode step each (row, head) pair attends one query over its cached keys. On CPU,
`scaled_dot_product_attention` pays about a microsecond of fixed cost per pair (two small BLAS
calls and their buffers), more than the pair's arithmetic, so a small model's decode attention runs
far below memory bandwidth. The C loop reads each pair's keys and values once and does the rest in
registers: 1.3-3.3x SDPA's speed per call at 64-256 rows, and the `micro` model's rollout about 1.15x
(`python benchmarks/decode_kernels.py`). It runs on one thread: with more torch threads,
SDPA spreads the pairs over them, so `engine.decode_kernels: auto` takes C only on one
(reinforge.kernels.choice).

How it is built: by reinforge.kernels.build, on first use, for this machine's CPU.
Numerics: the same softmax attention in a different summation order, with exp from a polynomial of
relative error under 2e-7: outputs agree with SDPA to about 1e-6 (tests/kernels/test_decode_attention.py).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

import torch

from reinforge.kernels.build import load_function

SOURCE = Path(__file__).with_suffix(".c")

I64, PTR = ctypes.c_int64, ctypes.c_void_p
ARGTYPES = (PTR, I64, I64, PTR, PTR, I64, I64, I64, PTR, I64, PTR, I64, I64, I64, I64, I64, ctypes.c_float)


def load() -> Callable[..., int]:
    """The kernel, built on first use; raises NativeCodeUnavailable (with the compiler's message)
    where it cannot be built. Built or not, the outcome is kept for the process."""
    return load_function(SOURCE, "decode_attention", *ARGTYPES)


def decode_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, key_bias: torch.Tensor, length: int, scale: float | None = None
) -> torch.Tensor:
    """softmax(scale q k^T + bias) v over cache slots [0, length): q [B, heads, d]; keys and
    values [B, kv_heads, slots, d] with the same strides (head h reads kv head h // (heads /
    kv_heads): grouped-query attention); key_bias [B, 1, 1, slots] (0 or -inf); scale the
    attention module's (default 1 / sqrt(d)). -> [B, heads, d]. Every row needs one slot with
    bias 0 below `length`."""
    rows, heads, dim = q.shape
    kv_heads = keys.shape[1]
    tensors = (q, keys, values, key_bias)
    if any(t.dtype != torch.float32 or t.device.type != "cpu" for t in tensors):  # the C loop reads raw float32 memory
        raise ValueError("decode_attention needs float32 CPU tensors")
    if keys.stride() != values.stride() or keys.shape != values.shape:
        raise ValueError("keys and values must have the same shape and strides")
    if q.stride(-1) != 1 or keys.stride(-1) != 1 or key_bias.stride(-1) != 1 or heads % kv_heads:
        raise ValueError("decode_attention needs contiguous last dimensions and heads divisible by kv heads")
    if not 0 < length <= keys.shape[2]:
        raise ValueError(f"length {length} outside the cache's {keys.shape[2]} slots")
    out = torch.empty(rows, heads, dim, dtype=torch.float32)
    status = load()(
        q.data_ptr(), q.stride(0), q.stride(1),
        keys.data_ptr(), values.data_ptr(), keys.stride(0), keys.stride(1), keys.stride(2),
        key_bias.data_ptr(), key_bias.stride(0),
        out.data_ptr(), rows, heads, kv_heads, length, dim, dim**-0.5 if scale is None else scale,
    )
    if status:
        raise MemoryError("decode_attention: out of memory for its scratch buffers")
    return out
