"""Which kernels the packed forward runs: `algo.packed_kernels` = auto | torch | native.

native: its attention (reinforge.learner.native_packed_attention), RMSNorm and SwiGLU
(reinforge.learner.native_layers) in C, forward and backward, compiled on first use with the
machine's C compiler (reinforge.native_build); a run that asks for native where no compiler
builds them stops at start-up with the compiler's message.
torch: torch's ops (SDPA on the padded layout, the model's own norm and MLP modules).
auto: native for CPU float32 activations on one torch thread where the kernels build, else torch.
Measured (`python benchmarks/packed_forward.py`, micro model, 8 x 8 rows, before the rotary
kernel): the update 1.34x and the reference forward 1.47x faster than packed with torch's kernels
on the vs_trl.py batch; 1.43x / 1.45x with completions of 1-128 tokens; 1.21x / 1.20x with
256-token prompts.
The C loops run on one thread (torch spreads its ops over several) and read raw float32 memory
(bf16 autocast takes torch's ops).
"""

from __future__ import annotations

import functools
import logging

import torch

from reinforge.learner import native_layers, native_packed_attention
from reinforge.native_build import NativeCodeUnavailable, unavailable_reason

logger = logging.getLogger(__name__)

MODES = ("auto", "torch", "native")
SOURCES = (native_packed_attention.SOURCE, native_layers.SOURCE)


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"packed_kernels must be one of {', '.join(MODES)}, not {mode!r}")


def wanted(mode: str) -> bool:
    """Whether `mode` takes the C kernels where they apply; "native" raises (with the compiler's
    message, NativeCodeUnavailable) where they cannot be built."""
    check_mode(mode)
    if mode == "torch":
        return False
    reasons = [reason for reason in map(unavailable_reason, SOURCES) if reason is not None]
    if reasons and mode == "native":
        raise NativeCodeUnavailable(reasons[0])
    if reasons:
        _log_unavailable(reasons[0])
    return not reasons


@functools.cache
def _log_unavailable(reason: str) -> None:
    logger.info("the packed forward runs torch's kernels: the C kernels are unavailable (%s)", reason)


def usable(activations: torch.Tensor, mode: str) -> bool:
    """Whether a forward with these activations can take the C kernels: CPU float32 (not under
    bf16 autocast), and in auto mode one torch thread."""
    return (
        activations.device.type == "cpu"
        and activations.dtype == torch.float32
        and (mode == "native" or torch.get_num_threads() == 1)
    )
