"""Per-token log-probs of given sequences under a model: the learner's side of invariant 1."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from reinforge.learner.packed_forward import native_kernels_usable, packed_token_logprobs, plan_packing, worth_packing


def token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    entropy_grad: bool = False,
    pack: bool = False,
    entropy: bool = True,
    packed_kernels: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits_t / temperature)[token_{t+1}] for right-padded rows: [N, T-1].

    Also returns the per-token entropy of the same distribution: detached for monitoring, or with
    gradient when `entropy_grad` (an entropy bonus); None with `entropy=False` (a reference's
    log-probs: two passes over the [positions, vocabulary] log-probs saved). The temperature must be the sampling
    temperature so these match the engine's behaviour log-probs.
    `pack` (a model `packed_forward.supports`): each distinct token is computed once, pads never,
    when that is faster (`worth_packing`: always with the C kernels); positions before a pad are then 0;
    `packed_kernels`: auto, torch or native (reinforge.kernels.choice).
    """
    if pack:
        packing = plan_packing(input_ids, attention_mask)
        if worth_packing(packing, input_ids, native_kernels_usable(model, packed_kernels)):
            return packed_token_logprobs(
                model, input_ids, attention_mask, packing, temperature, entropy_grad, entropy, packed_kernels
            )
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = logits.log_softmax(-1)
    chosen = log_probs.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    if not entropy:
        return chosen, None
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropies = -(log_probs.exp() * log_probs).sum(-1)
    return chosen, entropies
