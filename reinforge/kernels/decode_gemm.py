"""The decode step's matmuls in C (decode_gemm.c), on weights laid out once in column panels.

Why: a decode step multiplies a few dozen rows by every weight of the model, so each matrix is
streamed from memory at every step (SmolLM2-135M: 538 MB of fp32 weights per step, far more than
any cache). torch's GEMM (MKL) lays a weight out anew at every call and waits on its memory: 32
rows ran at 53-65 GFLOP/s on this project's machine. Here each matrix is stored once as
contiguous 48-column panels, and the next panel is prefetched while the current one is
multiplied: 1.2-1.6x torch's GFLOP/s for the MLP's gate|up and the LM head at 32 rows, about
equal to it for the smaller matrices, and 1.1-1.2x on whole SmolLM2-135M rollouts
(`python benchmarks/decode_gemm.py`; docs/real_model.md). It replaces the decoder's copy of each
weight (no extra memory), and runs for prompt batches too, where it is on a par with torch's.

When: `FusedLlamaDecoder` takes it where its other C kernels run (CPU float32, one thread:
reinforge.kernels.choice) on an AVX-512 CPU, for a model of at least MIN_STREAMED_BYTES of weights:
a small model's weights stay in cache, where the prefetch gains nothing and torch's GEMM keeps
its exact rounding (the default recipe's samples do not change).
Numerics: each output is summed over k in order, with fused multiply-adds; against float64 its
error is of the same size as torch's (tests/kernels/test_decode_gemm.py), but not the same bits,
so a seed's samples can differ from torch's path where two tokens' cumulative probabilities sit
within float rounding of the draw.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F

from reinforge.kernels.build import load_library

SOURCE = Path(__file__).with_suffix(".c")
PANEL = 48  # output columns per panel (NB in decode_gemm.c)
MIN_STREAMED_BYTES = 64 << 20  # weights of a model smaller than this stay in cache between decode steps
I64, PTR = ctypes.c_int64, ctypes.c_void_p


@functools.cache
def _library():
    library, _ = load_library(SOURCE)
    if library is None or not library.has_vector_path():
        return None
    library.panel_linear.argtypes = [PTR, I64, PTR, PTR, PTR, I64, I64, I64, I64, PTR, I64]
    library.panel_linear.restype = ctypes.c_int
    return library


def available() -> bool:
    """Whether the kernel builds here and has its vector path (an AVX-512 CPU)."""
    return _library() is not None


class PanelMatrix:
    """A linear layer's weight [out, in] in column panels, for `linear`."""

    def __init__(self, weight: torch.Tensor):
        if weight.dim() != 2 or weight.dtype != torch.float32 or weight.device.type != "cpu":
            raise ValueError(f"PanelMatrix needs a float32 CPU [out, in] weight, got {weight.dtype} {tuple(weight.shape)} on {weight.device}")
        self.out_features, self.in_features = weight.shape
        count = -(-self.out_features // PANEL)
        padding = count * PANEL - self.out_features
        padded = F.pad(weight.detach(), (0, 0, 0, padding)) if padding else weight.detach()  # no transient copy without padding
        # always a copy (clone): an optimizer step must not change what a built decoder samples
        self._then: weakref.ref | None = None
        self.panels = padded.reshape(count, PANEL, self.in_features).transpose(1, 2).clone(memory_format=torch.contiguous_format)  # [count, in, PANEL]

    @property
    def then(self) -> PanelMatrix | None:
        """The matrix multiplied next, whose first panel `linear` prefetches. Held weakly: a chain is a
        cycle, and a cycle is freed only when the garbage collector runs, so a dropped decoder would
        keep its 0.5 GiB of panels through the learner's update (TorchEngine.release_memory)."""
        return None if self._then is None else self._then()

    @then.setter
    def then(self, following: PanelMatrix | None) -> None:
        self._then = None if following is None else weakref.ref(following)

    def weight(self) -> torch.Tensor:
        """The [out, in] weight (a copy), for callers the kernel does not serve."""
        return self.panels.transpose(1, 2).reshape(-1, self.in_features)[: self.out_features]

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        """Rows `index` of the [out, in] weight: an embedding lookup in a tied LM head."""
        return self.panels[index // PANEL, :, index % PANEL]

    def nbytes(self) -> int:
        return self.panels.numel() * self.panels.element_size()


def chain(matrices: list[PanelMatrix]) -> None:
    """Say in which order a step multiplies `matrices` (cyclically): while the last panel of one
    is multiplied, the first panel of the next is fetched (a small matrix otherwise starts by
    waiting on memory)."""
    for matrix, following in zip(matrices, matrices[1:] + matrices[:1]):
        matrix.then = following


def linear(x: torch.Tensor, matrix: PanelMatrix, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, in] @ W^T + bias -> [M, out]; torch's linear where the kernel cannot take x."""
    library = _library()
    usable = library is not None and x.dim() == 2 and x.shape[1] == matrix.in_features and all(
        t.dtype == torch.float32 and t.device.type == "cpu" for t in (x, *([] if bias is None else [bias]))
    )
    if not usable:
        return F.linear(x, matrix.weight().to(x.dtype), bias)
    if x.stride(1) != 1:
        x = x.contiguous()
    if bias is not None and (bias.shape != (matrix.out_features,) or not bias.is_contiguous()):
        bias = bias.reshape(matrix.out_features).contiguous()
    y = x.new_empty(x.shape[0], matrix.out_features)
    then = matrix.then
    library.panel_linear(
        x.data_ptr(), x.stride(0), matrix.panels.data_ptr(), 0 if bias is None else bias.data_ptr(), y.data_ptr(), y.stride(0),
        x.shape[0], matrix.out_features, matrix.in_features,
        0 if then is None else then.panels.data_ptr(), 0 if then is None else then.in_features * PANEL,
    )
    return y
