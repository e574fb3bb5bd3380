"""Decode-step matmuls against weights packed once per row count (MKL's sgemm pack API).

Why: a decode step multiplies a few rows (one per sequence) by every weight matrix, and a plain
sgemm re-lays its weight operand out into the kernel's blocked format at every call. MKL's
`cblas_sgemm_pack` does that once (`torch.ops.mkl._mkl_reorder_linear_weight`) and
`cblas_sgemm_compute` reuses it (`torch.ops.mkl._mkl_linear`); the same B multiplied by the same
number of rows at every step is the case that API is for. docs/real_model.md has the measured gain.

A pack is made for one row count M: torch's `_mkl_linear` takes the packed path only when the
input has exactly M rows (otherwise it runs a plain linear on the unpacked weight), so the packs
here are keyed by M, made on first use and remade when the decode batch's row count changes (the
engine drops finished rows, halving the batch at most, so a call remakes them a few times at most).
The result for a given M is deterministic, so a seed still gives the same samples.
"""

from __future__ import annotations

import torch


def available(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether this torch can multiply by MKL-packed weights here: CPU float32, MKL and oneDNN built in."""
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and torch.backends.mkl.is_available()
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkl, "_mkl_linear")
        and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")
    )


class PackedLinears:
    """F.linear for decode steps, over packs of the given weights for the current row count.

    A weight is passed as the [out, in] tensor the caller keeps (it is the pack's source and the
    shape `_mkl_linear` reads); it must not change while its pack is held (the fused decoder's
    weights are its own frozen copy)."""

    def __init__(self) -> None:
        self.rows: int | None = None
        self.packs: dict[int, torch.Tensor] = {}

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.shape[0]
        if rows != self.rows:
            self.packs = {}  # the old row count's packs go before new ones are made: one set at a time
            self.rows = rows
        packed = self.packs.get(weight.data_ptr())
        if packed is None:
            packed = self.packs[weight.data_ptr()] = torch.ops.mkl._mkl_reorder_linear_weight(weight, rows)
        return torch.ops.mkl._mkl_linear(x, packed, weight, bias, rows)
