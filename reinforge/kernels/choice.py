"""Whether a part runs its C kernels: `engine.decode_kernels` and `algo.packed_kernels`, each
auto | torch | native.

native: the C kernels (reinforge.kernels), compiled on first use with the machine's C compiler; a
run that asks for native where they cannot be built stops at start-up with the compiler's message.
torch: torch's ops only.
auto: the C kernels for CPU float32 tensors on one torch thread where they build, else torch's
ops (logged once). The C loops run on one thread (torch spreads its ops over several) and read raw
float32 memory (a bf16 engine or bf16 autocast takes torch's ops).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import torch

from reinforge.kernels.build import NativeCodeUnavailable, unavailable_reason

logger = logging.getLogger(__name__)

MODES = ("auto", "torch", "native")


def check_mode(mode: str, setting: str) -> None:
    if mode not in MODES:
        raise ValueError(f"{setting} must be one of {', '.join(MODES)}, not {mode!r}")


def wanted(mode: str, setting: str, sources: tuple[Path, ...]) -> bool:
    """Whether `setting: mode` takes the C kernels of `sources` where they apply; "native" raises
    NativeCodeUnavailable (with the compiler's message) where they cannot be built."""
    check_mode(mode, setting)
    if mode == "torch":
        return False
    reasons = [reason for reason in map(unavailable_reason, sources) if reason is not None]
    if reasons and mode == "native":
        raise NativeCodeUnavailable(reasons[0])
    if reasons:
        _log_unavailable(setting, reasons[0])
    return not reasons


@functools.cache
def _log_unavailable(setting: str, reason: str) -> None:
    logger.info("%s=auto runs torch's ops: the C kernels are unavailable (%s)", setting, reason)


def usable(tensor: torch.Tensor, mode: str) -> bool:
    """Whether a call on `tensor` can take the C kernels: CPU float32, not under autocast (whose
    matmuls would hand them bf16 activations), and in auto mode one torch thread."""
    return (
        tensor.device.type == "cpu"
        and tensor.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and (mode == "native" or torch.get_num_threads() == 1)
    )
