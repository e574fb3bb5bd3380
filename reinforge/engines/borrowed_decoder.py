"""The fused Llama decoder over the model's own weight tensors: no copy of its own.

`FusedLlamaDecoder` copies every weight (in the engine's dtype, q/k/v and gate/up joined, matrices
laid out for the CPU GEMM), so an optimizer step never changes what a policy version samples: a
second full copy of the policy while it samples. A sharded learner's rank 0
(workers.sharding=fsdp, reinforge.distributed.learner_group) never steps the loop's model in
place: its new weights arrive only when the sharded update is gathered into it, before the
engine's next `sync_weights`, which drops the decoder. There the engine borrows instead
(`TorchEngine(borrow_weights=True)`): the decoder reads the model's tensors as they are, runs q, k
and v (and gate, up) as separate matmuls whose outputs it joins, and multiplies the [out, in]
matrices as stored. The same math; the rounding of a differently blocked GEMM (engine and learner
log-probs agree within the bounds the tests already use). Borrowing needs the engine's dtype to be
the model's (a bf16 engine over a float32 model casts, i.e. copies: `TorchEngine` then copies).
Over a LoRA model (peft layers in the base model) it reads each adapted projection unmerged, base
and adapter where they are (reinforge.engines.borrowed_weights), instead of sampling a merged copy.
"""

from __future__ import annotations

import torch

from reinforge.engines.llama_decoder import FusedLlamaDecoder
from reinforge.engines.borrowed_weights import LoraMatrix, weight_of


class BorrowedLlamaDecoder(FusedLlamaDecoder):
    """A `FusedLlamaDecoder` whose weights are the model's own tensors (detached views, no copy)."""

    def __init__(self, model, dtype: torch.dtype = torch.float32, decode_kernels: str = "auto"):
        held = {p.dtype for p in model.parameters()}
        if held != {dtype}:
            raise ValueError(f"a borrowing decoder samples in the model's dtype ({sorted(map(str, held))}), not {dtype}: it would need a copy")
        super().__init__(model, dtype, decode_kernels)

    def _take_weights(self, model) -> None:
        self.panel_gemm = False  # panels (reinforge.kernels.decode_gemm) would be a copy of the weights
        super()._take_weights(model)

    def _vector(self, t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.detach()

    def _weight(self, module: torch.nn.Module) -> torch.Tensor | LoraMatrix:
        return weight_of(module)

    def _matrix(self, t: torch.Tensor | LoraMatrix) -> torch.Tensor | LoraMatrix:
        return t if isinstance(t, LoraMatrix) else t.detach()

    def _joined_matrix(self, parts: list[torch.Tensor | LoraMatrix]) -> tuple[torch.Tensor | LoraMatrix, ...]:
        return tuple(self._matrix(part) for part in parts)

    def _joined_vector(self, parts: list[torch.Tensor | None]) -> tuple[torch.Tensor, ...] | None:
        return None if parts[0] is None else tuple(part.detach() for part in parts)
