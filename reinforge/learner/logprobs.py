"""Per-token log-probs of given sequences under a model: the learner's side of invariant 1."""

from __future__ import annotations

import contextlib

import torch
from transformers import PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer

from reinforge.learner.chunked_logprobs import DEFAULT_CHUNK_TOKENS, chunked_token_logprobs
from reinforge.learner.packed_forward import native_kernels_usable, packed_token_logprobs, plan_packing, worth_packing
from reinforge.models.lora import is_lora_model

# Model types whose causal-LM forward is `lm_head(decoder(...)[0])`, nothing after it (no logit
# soft-capping or scaling): for these the log-probs are computed from the decoder's hidden states
# in chunks (reinforge.learner.chunked_logprobs). Other models go through their own forward.
PLAIN_OUTPUT_LAYER = ("llama", "mistral", "qwen2", "qwen3", "gpt2")


def output_layer(model: PreTrainedModel) -> torch.nn.Linear | None:
    """The model's output projection when the chunked log-probs can use its weight directly: a
    plain nn.Linear on a model type of PLAIN_OUTPUT_LAYER. None for a LoRA-adapted or wrapped
    lm_head (peft layers are not nn.Linear) and a compiled forward (`compile_forward`
    compiles the whole model's call; the decoder alone would run eagerly), which keep the
    model's own forward and its full logits."""
    causal_lm = model.get_base_model() if is_lora_model(model) else model
    if getattr(causal_lm.config, "model_type", None) not in PLAIN_OUTPUT_LAYER:
        return None
    if getattr(causal_lm, "_compiled_call_impl", None) is not None:
        return None
    head = causal_lm.get_output_embeddings()
    return head if type(head) is torch.nn.Linear else None


def token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    entropy_grad: bool = False,
    pack: bool = False,
    entropy: bool = True,
    packed_kernels: str = "auto",
    chunk_tokens: int | None = DEFAULT_CHUNK_TOKENS,
    checkpoint_layers: bool = False,
    needed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits_t / temperature)[token_{t+1}] for right-padded rows: [N, T-1].

    Also returns the per-token entropy of the same distribution: detached for monitoring, or with
    gradient when `entropy_grad` (an entropy bonus); None with `entropy=False` (a reference's
    log-probs). The temperature must be the sampling temperature so these match the engine's
    behaviour log-probs. Positions whose next token is a pad come back 0.
    `pack` (a model `packed_forward.supports`): each distinct token is computed once, pads never,
    when that is faster (`worth_packing`: always with the C kernels);
    `packed_kernels`: auto, torch or native (reinforge.kernels.choice).
    `chunk_tokens` (algo.logprob_chunk_tokens): the log-softmax runs on the decoder's hidden
    states this many tokens at a time, forward and backward (reinforge.learner.chunked_logprobs),
    where `output_layer` allows it; None computes the whole [tokens, vocabulary] logits.
    `checkpoint_layers` (algo.activation_checkpointing): each decoder layer's activations are
    recomputed in the backward instead of kept (the padded forward needs
    `enable_activation_checkpointing(model)` once).
    `needed` [N, T-1] bool (a batch's loss_mask): the positions the caller reads. With chunks, only
    their hidden states go through the output layer, and the others come back 0 (as pads do): in
    a GRPO batch that skips the prompt's own tokens, which no loss reads (35 of 547 rows a group
    on SmolLM2's chat prompts). TRL's `logits_to_keep` does the same for the completion.
    """
    if pack:
        packing = plan_packing(input_ids, attention_mask)
        if worth_packing(packing, input_ids, native_kernels_usable(model, packed_kernels)):
            return packed_token_logprobs(
                model, input_ids, attention_mask, packing, temperature, entropy_grad, entropy, packed_kernels,
                chunk_tokens=chunk_tokens if output_layer(model) is not None else None, checkpoint_layers=checkpoint_layers,
                needed=needed,
            )
    head = output_layer(model) if chunk_tokens is not None else None
    with checkpointed_layers(model) if checkpoint_layers else contextlib.nullcontext():
        if head is None:
            return _full_logits_logprobs(model, input_ids, attention_mask, temperature, entropy_grad, entropy)
        hidden = decoder_hidden_states(model, input_ids, attention_mask)
    predicts = attention_mask[:, 1:].bool()  # position t predicts a real token t+1
    if needed is not None:
        predicts = predicts & needed
    where = predicts.nonzero(as_tuple=True)
    chosen, per_token = chunked_token_logprobs(
        hidden[:, :-1][where], head.weight, head.bias, torch.arange(len(where[0]), device=input_ids.device),
        input_ids[:, 1:][where], temperature, chunk_tokens, entropy, entropy_grad and torch.is_grad_enabled(),
    )
    chosen = chosen.new_zeros(predicts.shape).index_put(where, chosen)
    if not entropy:
        return chosen, None
    return chosen, per_token.new_zeros(predicts.shape).index_put(where, per_token)


def decoder_hidden_states(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The final (normed) hidden states [N, T, H] that the model's lm_head reads: its decoder's output."""
    causal_lm = model.get_base_model() if is_lora_model(model) else model
    decoder = getattr(causal_lm, causal_lm.base_model_prefix)
    return decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)[0]


def _full_logits_logprobs(model, input_ids, attention_mask, temperature, entropy_grad, entropy):
    """The model's own forward and its [N, T-1, V] logits (models `output_layer` cannot chunk)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = logits.log_softmax(-1)
    predicts = attention_mask[:, 1:].bool()
    chosen = log_probs.gather(-1, input_ids[:, 1:, None]).squeeze(-1) * predicts
    if not entropy:
        return chosen, None
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropies = -(log_probs.exp() * log_probs).sum(-1) * predicts
    return chosen, entropies


def enable_activation_checkpointing(model: PreTrainedModel) -> None:
    """`transformers`' gradient checkpointing on the model's decoder layers (non-reentrant), for
    the padded forward; the packed forward checkpoints its layers itself (`checkpoint_layers`)."""
    causal_lm = model.get_base_model() if is_lora_model(model) else model
    if not getattr(causal_lm, "supports_gradient_checkpointing", False):
        raise ValueError(
            f"algo.activation_checkpointing: {type(causal_lm).__name__} does not support gradient checkpointing in "
            "transformers; set algo.activation_checkpointing=false"
        )
    kwargs = {"use_reentrant": False}
    if hasattr(causal_lm, "activation_checkpointing_enable"):  # its name from transformers 5.x on
        causal_lm.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        causal_lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


@contextlib.contextmanager
def checkpointed_layers(model: torch.nn.Module):
    """Arm `transformers`' checkpointing for one forward although the model is in eval mode.

    Why: its layers checkpoint only when `self.training`, and the learner's forward runs in eval
    mode (dropout off, see PolicyLearner.train_step). Setting the flag on the checkpointed layer
    modules alone (not `.train()`, which recurses) leaves every dropout inside them off."""
    armed = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing and not m.training]
    for m in armed:
        m.training = True
    try:
        yield
    finally:
        for m in armed:
            m.training = False
