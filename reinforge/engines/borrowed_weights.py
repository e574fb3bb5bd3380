"""The weights a borrowing decoder multiplies (reinforge.engines.borrowed_decoder): the parts of a
joined matrix side by side, and a LoRA-adapted projection read unmerged, W x + s B (A x).

A LoRA policy's engine samples a merged copy (reinforge.models.lora.inference_copy: W + s B A for
every adapted matrix), i.e. a second full copy of the model. A sharded learner's rank 0
(workers.sharding=fsdp) keeps one full copy only (reinforge.engines.borrowed_decoder): there the
decoder reads the frozen base W and the adapters A, B where they are, and each of its matmuls adds
the adapter's low-rank path the way peft's forward does (`lora.Linear`: base_layer(x) +
lora_B(lora_A(dropout(x))) * scaling, dropout off in eval). Extra work per token and layer:
2 r (in + out) multiply-adds per adapted matrix, against in x out for the base.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LoraMatrix:
    """One adapted [out, in] weight: `base` W, `down` A [r, in], `up` B [out, r], `scale` alpha / r."""

    base: torch.Tensor
    down: torch.Tensor
    up: torch.Tensor
    scale: float

    def linear(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        return F.linear(x, self.base, bias) + F.linear(F.linear(x, self.down), self.up) * self.scale


def joined_linear(x: torch.Tensor, weight, bias) -> torch.Tensor:
    """F.linear over one matrix, or over the parts of a joined one (a tuple: a borrowing decoder's
    q, k, v or gate, up), their outputs side by side; a part may be a `LoraMatrix`."""
    if isinstance(weight, torch.Tensor):
        return F.linear(x, weight, bias)
    if isinstance(weight, LoraMatrix):
        return weight.linear(x, bias)
    return torch.cat([joined_linear(x, w, b) for w, b in zip(weight, bias or (None,) * len(weight))], dim=-1)


def is_lora_layer(module: torch.nn.Module) -> bool:
    return hasattr(module, "lora_A") and hasattr(module, "base_layer")


def active_adapters(module: torch.nn.Module) -> list[str]:
    return [a for a in module.active_adapters if a in module.lora_A]


def weight_of(module: torch.nn.Module) -> torch.Tensor | LoraMatrix:
    """What a borrowing decoder multiplies for `module`: its weight, or for a peft LoRA layer with
    an active adapter the base weight and that adapter, unmerged (`unmerged_reason` has said yes)."""
    if not is_lora_layer(module) or module.disable_adapters:
        return module.weight.detach()
    (adapter,) = active_adapters(module)
    return LoraMatrix(
        module.base_layer.weight.detach(), module.lora_A[adapter].weight.detach(), module.lora_B[adapter].weight.detach(),
        float(module.scaling[adapter]),
    )


def unmerged_reason(model: torch.nn.Module) -> str | None:
    """Why a borrowing decoder cannot read this LoRA model's adapters unmerged (the engine then
    samples a merged copy), or None."""
    for name, module in model.named_modules():
        if not is_lora_layer(module) or module.disable_adapters:
            continue
        active = active_adapters(module)
        if len(active) > 1:
            return f"{name} has {len(active)} active adapters"
        if getattr(module, "merged", False):
            return f"{name}'s adapter is merged into its weight"
        if active and getattr(module, "use_dora", {}).get(active[0], False):
            return f"{name} is a DoRA layer (a magnitude vector on the merged weight)"
        if name.split(".")[-1] in ("lm_head", "embed_tokens"):
            return f"{name} is adapted: the decoder reads the embedding and the head as plain matrices"
    return None
