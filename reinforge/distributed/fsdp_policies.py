"""How FSDP2 holds and computes a sharded learner's weights: workers.fsdp_precision and workers.fsdp_offload.

Precision (`MixedPrecisionPolicy`, as verl and torchtitan run FSDP2): with `bf16` each layer's
weights are all-gathered and computed in bfloat16, gradients are reduce-scattered in float32, and
the sharded master weights and AdamW moments stay float32, so the update itself loses nothing to
bf16, only the forward and backward do. `auto` is bf16 on a GPU (its tensor cores run bf16 at
~15x float32's rate, and the all-gathers move half the bytes) and fp32 on the CPU: there bf16 does
run (gloo all-gathers it) but a CPU has no faster bf16 matmul to gain, and the CPU path is the one
whose sharded step is checked against one process within float32 bounds and resumes bitwise.

Offload (`CPUOffloadPolicy`): the sharded weights, gradients and AdamW state live in host memory
and the optimizer steps there; each layer's weights go to the GPU for its forward and backward.
It trades PCIe traffic for GPU memory, so it means something only for a model on a GPU (on the CPU
it is refused, reinforge.run.sharding_check). Collectives on those host tensors (gathering the
full weights for rank 0, the global gradient norm) need a CPU backend next to NCCL, so the group
is then `cuda:nccl,cpu:gloo`, as torchtitan does.
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy

PRECISIONS = ("auto", "fp32", "bf16")


def resolve_precision(setting: str, device: str) -> str:
    """`fp32` or `bf16` for workers.fsdp_precision=`setting` on model.device=`device`."""
    if setting not in PRECISIONS:
        raise ValueError(f"workers.fsdp_precision={setting!r} is not one of {', '.join(PRECISIONS)}")
    if setting == "auto":
        return "bf16" if torch.device(device).type == "cuda" else "fp32"
    return setting


def fully_shard_options(precision: str, offload: bool) -> dict:
    """The keyword arguments of `fully_shard` for a resolved precision (fp32 / bf16) and offload."""
    options = {}
    if precision == "bf16":
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    elif precision != "fp32":
        raise ValueError(f"an FSDP precision is fp32 or bf16 once resolved, not {precision!r}")
    if offload:
        options["offload_policy"] = CPUOffloadPolicy()
    return options


def process_group_backend(device: str, offload: bool) -> str | None:
    """The backend of a sharded learner's process group: None (the device's default) unless its
    shards live in host memory while it computes on a GPU."""
    return "cuda:nccl,cpu:gloo" if offload and torch.device(device).type == "cuda" else None
