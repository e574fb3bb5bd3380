"""A LoRA-adapted linear layer as one autograd node, for the packed forward: `project(module, x)`.

The formula is peft's vanilla LoRA (Hu et al. 2021, arXiv 2106.09685):

    y = x W^T + b + s (x A^T) B^T          W [out, in] frozen, A [r, in], B [out, r], s = alpha / r

Why not peft's own forward: it computes `base(x) + lora_B(lora_A(dropout(x))) * s` as four ops,
each with a [tokens, out] result, and autograd keeps lora_A's small [tokens, r] output for the
backward. On a CPU, glibc's heap puts those small saved blocks into the holes that the freed
temporaries leave, and whether the large activations that follow still fit there depends on the
order of earlier allocations: the same LoRA step of SmolLM2-135M (4 x 4 rows of 36 + 128 tokens,
r = 8) peaked at 3.8 GB in one process and 5.9 GB in the next, which differed only in
PYTHONHASHSEED. Here the layer makes one [tokens, out] output and saves only x (which the
other projections of the same input save too) and the parameters; the backward recomputes x A^T,
r columns, a small fraction of the layer's work.

Backward (dy = dL/dy):
    dx = dy W + s (dy B) A        dB = s dy^T (x A^T)        dA = s (dy B)^T x
    dW = dy^T x, db = sum(dy)     only where they require grad (a LoRA base does not)

Anything else peft supports (DoRA and other variants, several active adapters, dropout in
training, merged or disabled adapters, autocast) takes the module's own forward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def vanilla_lora(module) -> tuple[torch.Tensor, torch.Tensor, float] | None:
    """(A, B, s) when `module` is a peft LoRA Linear this node computes exactly, else None."""
    if not hasattr(module, "lora_A") or not isinstance(getattr(module, "base_layer", None), torch.nn.Linear):
        return None
    if module.disable_adapters or module.merged:
        return None
    active = [name for name in module.active_adapters if name in module.lora_A]
    if len(active) != 1 or active[0] in getattr(module, "lora_variant", {}):
        return None
    name = active[0]
    dropout = module.lora_dropout[name]
    if not isinstance(dropout, torch.nn.Identity) and dropout.training and dropout.p > 0:
        return None
    return module.lora_A[name].weight, module.lora_B[name].weight, float(module.scaling[name])


def project(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """module(x), through the single LoRA node when the module is a plain LoRA Linear."""
    lora = None if torch.is_autocast_enabled(x.device.type) else vanilla_lora(module)
    if lora is None:
        return module(x)
    a, b, scale = lora
    base = module.base_layer
    if not (x.dtype == base.weight.dtype == a.dtype == b.dtype):  # peft casts between dtypes here: its forward does it right
        return module(x)
    shape = x.shape
    out = _LoraLinear.apply(x.reshape(-1, shape[-1]), base.weight, base.bias, a, b, scale)
    return out.view(*shape[:-1], out.shape[-1])


class _LoraLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, a, b, scale):
        out = F.linear(x, weight, bias)
        out.addmm_(x @ a.t(), b.t(), alpha=scale)  # the [tokens, r] product is freed here
        ctx.save_for_backward(x, weight, bias, a, b)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, d_out):
        x, weight, bias, a, b = ctx.saved_tensors
        scale = ctx.scale
        d_out = d_out.contiguous()
        d_low = d_out @ b  # [tokens, r]
        dx = dw = db = da = dbb = None
        if ctx.needs_input_grad[0]:
            dx = (d_out @ weight).addmm_(d_low, a, alpha=scale)
        if ctx.needs_input_grad[1]:
            dw = d_out.t() @ x
        if bias is not None and ctx.needs_input_grad[2]:
            db = d_out.sum(0)
        if ctx.needs_input_grad[3]:
            da = (d_low.t() @ x).mul_(scale)
        if ctx.needs_input_grad[4]:
            dbb = (d_out.t() @ (x @ a.t())).mul_(scale)
        return dx, dw, db, da, dbb, None
