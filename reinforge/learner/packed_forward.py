"""Log-probs with every distinct token computed once: no pads, and a shared prefix (a group's prompt)
computed once for all the rows that share it (`algo.pack_sequences`).

Why: a GRPO batch pads every row to the longest, and holds each prompt G times. In a causal model
the hidden states of token t depend only on tokens 0..t, so two rows that agree on tokens 0..t have
the same hidden states there at every layer. Here each (row, position) is mapped to the first row
that has the same prefix up to it; only those first occurrences go through the position-wise work
(embedding, norms, projections, MLP, LM head, log-softmax), which is most of a forward and backward.
With torch's kernels, attention runs in the padded [rows, T] layout: each row's keys and values
are gathered from the tokens that computed them, and only the outputs of the tokens computed in
that row are used; rows that share a long prefix with an earlier row (a group's other G - 1)
attend with queries from where they diverge only. With the C kernels (`algo.packed_kernels`,
reinforge.kernels) attention reads the packed tokens through each row's slot map (`RowPlan`),
and RMSNorm, rotary and SiLU x up are one pass each, forward and backward; in the update the
norms' outputs and SiLU x up are then rebuilt in the backward rather than kept
(reinforge.learner.rebuilt_activations). Shared tokens get the gradient of every row that uses them, as in the padded
forward. Measured (benchmarks/packed_forward.py, micro model, 8 x 8 rows): update 1.08x faster
on the 64-token fixed-length batch of benchmarks/vs_trl.py, 1.75-1.82x with completion lengths of
1-128 tokens, 4.0-4.4x with 256-token prompts.

This is the idea of "Prefix Grouper: Efficient GRPO Training through Shared-Prefix Forward" (Liu et
al. 2025, arXiv:2506.05433) and of padding-free packing, found by comparing tokens rather than by
trusting the batch's layout, so multi-turn rows that share more than the prompt share it too.

Same math as the `transformers` forward, module by module (the model's own projections are
called, and with torch's kernels its norms and MLP too, so LoRA adapters and their
`disable_adapter()` work; a plain LoRA Linear runs as one node, reinforge.learner.lora_projection), for the model types the fused decoder supports. Log-probs agree with the padded forward to float rounding
(matmuls over other row counts); positions whose next token is a pad come back 0.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from transformers import PreTrainedModel

from reinforge.engines.llama_decoder import supports as decoder_supports
from reinforge.engines.rotary import rotate, signed_sin
from reinforge.engines.shared_prefixes import first_rows_with_prefix
from reinforge.kernels import choice, layers, packed_attention
from reinforge.kernels.packed_attention import RowPlan
from reinforge.learner.chunked_logprobs import chunked_token_logprobs
from reinforge.learner.lora_projection import project
from reinforge.learner.rebuilt_activations import RebuiltActivations
from reinforge.models.lora import is_lora_model

# With torch's kernels packing moves every token between the packed and padded layouts once per
# layer (a few passes over the activations): below this share of saved positions the padded
# forward is as fast. The C kernels need no such moves (`worth_packing`).
MIN_SAVED_SHARE = 0.05
# A second attention call (with an explicit mask, slower per query than a causal one) for the
# rows that diverge late, when their queries can start at this share of the width or later.
MIN_QUERY_OFFSET = 0.25
KERNEL_SOURCES = (packed_attention.SOURCE, layers.SOURCE)
# The name of `run_layer` as a method of an FSDP-sharded decoder layer, registered with FSDP so
# that the layer's shards are gathered for it: FSDP's hooks run on `layer(...)` only, which the
# packed forward never calls (reinforge.distributed.sharded_forward).
SHARDED_LAYER_METHOD = "sharded_packed_layer"
# With the C kernels, the update's forward rebuilds the norms' outputs and SiLU(gate) x up in the
# backward instead of keeping them (reinforge.learner.rebuilt_activations): 32% fewer saved
# numbers per token on SmolLM2, bitwise the same gradients. False keeps them (to measure it).
REBUILD_CHEAP_ACTIVATIONS = True


@dataclass
class AttentionCall:
    """Rows of the padded layout attended in one call, their queries from column `offset` on."""

    source: torch.Tensor  # [R, T] index of the token in each key slot (0 on pads: never attended)
    offset: int
    mask: torch.Tensor | None  # [T - offset, T] causal mask of the queries from `offset` (None: is_causal)


@dataclass
class Packing:
    """Where the U distinct tokens of a right-padded batch [N, T] are computed, and who uses them."""

    token_ids: torch.Tensor  # [U]
    positions: torch.Tensor  # [U] position in its row (rotary)
    source: torch.Tensor  # [N, T] index of the token at (row, t) among the U; U on pads
    calls: list[AttentionCall]
    outputs: torch.Tensor  # [U] where each token's attention output is among the calls' outputs, in order
    rows: RowPlan  # the same attention for the C kernel (reinforge.kernels.packed_attention)

    @property
    def num_tokens(self) -> int:
        return self.token_ids.shape[0]


def plan_packing(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Packing:
    """Map each real (row, t) of a right-padded batch to the first row with the same tokens 0..t."""
    n, width = input_ids.shape
    valid = attention_mask.bool()
    owner = first_rows_with_prefix(input_ids, valid)
    computed = (owner == torch.arange(n, device=input_ids.device)[:, None]) & valid
    index = computed.flatten().cumsum(0).view(n, width) - 1  # row-major: a row's tokens stay together
    num_tokens = int(computed.sum())
    source = torch.where(valid, index.gather(0, owner), torch.full_like(index, num_tokens))
    rows, cols = computed.nonzero(as_tuple=True)
    calls, outputs, row_plan = plan_attention(rows, cols, source.masked_fill(~valid, 0), width)
    return Packing(input_ids[computed], cols, source, calls, outputs, row_plan)


def plan_attention(
    rows: torch.Tensor, cols: torch.Tensor, source: torch.Tensor, width: int
) -> tuple[list[AttentionCall], torch.Tensor, RowPlan]:
    """The attention calls for tokens computed at (rows, cols) of the padded layout, and the
    same attention as the C kernel reads it (each row's slots, and the columns it computes).

    A row computes a suffix of its tokens (once it differs from every earlier row, it differs at
    every later position too). Rows that share a long prefix with an earlier one (the G - 1 other
    rows of a group) need queries only from where they diverge: they go in a second call whose
    queries start at the earliest such column, when that saves a quarter of the queries or more.
    Each call is as wide as its longest row, and a call's shorter half of rows gets a call of its
    own when that saves a quarter of its attention (rows of varied length)."""
    attention_rows, rows = torch.unique(rows, return_inverse=True)
    first = torch.full((len(attention_rows),), width, device=rows.device).scatter_reduce(0, rows, cols, "amin")
    lengths = torch.zeros_like(first).scatter_reduce(0, rows, cols + 1, "amax")
    late = first > 0
    offset = int(first[late].min()) if late.any() else 0
    if offset < width * MIN_QUERY_OFFSET:
        late, offset = torch.zeros_like(late), 0
    calls, outputs, start = [], torch.empty_like(rows), 0
    positions = torch.arange(width, device=rows.device)
    for members, call_offset in ((~late).nonzero().squeeze(1), 0), (late.nonzero().squeeze(1), offset):
        for part in _split_by_length(members, lengths, call_offset):
            call_width = int(lengths[part].max())
            in_part = torch.zeros_like(late)
            in_part[part] = True
            mine = in_part[rows]
            rank = torch.empty_like(first)
            rank[part] = torch.arange(len(part), device=rows.device)
            queries = call_width - call_offset
            outputs[mine] = start + rank[rows[mine]] * queries + cols[mine] - call_offset
            start += len(part) * queries
            call_positions = positions[:call_width]
            mask = None if call_offset == 0 else call_positions[None, :] <= call_positions[call_offset:, None]
            calls.append(AttentionCall(source[attention_rows[part], :call_width], call_offset, mask))
    row_plan = RowPlan(source[attention_rows, : int(lengths.max()) if len(lengths) else 0], first, lengths)
    return calls, outputs, row_plan


def _split_by_length(members: torch.Tensor, lengths: torch.Tensor, offset: int) -> list[torch.Tensor]:
    """`members` as one call, or as its shorter and longer halves when that saves a quarter of the
    attention (queries x keys); none when empty."""
    if len(members) < 2:
        return [members] if len(members) else []
    ordered = members[lengths[members].argsort()]
    short, long = ordered[: len(ordered) // 2], ordered[len(ordered) // 2 :]

    def cost(part: torch.Tensor) -> int:
        widest = int(lengths[part].max())
        return len(part) * (widest - offset) * widest

    return [short, long] if cost(short) + cost(long) <= 0.75 * cost(ordered) else [members]


def native_kernels_wanted(mode: str) -> bool:
    """Whether `algo.packed_kernels: mode` runs the attention, norms, rotary and MLP activation in C
    (reinforge.kernels.choice); native raises where they cannot be built."""
    return choice.wanted(mode, "algo.packed_kernels", KERNEL_SOURCES)


def supports(model: PreTrainedModel) -> bool:
    base = model.get_base_model() if is_lora_model(model) else model
    return decoder_supports(base)


def worth_packing(packing: Packing, input_ids: torch.Tensor, native: bool = False) -> bool:
    """Whether the packed forward beats the padded one on this batch. With the C kernels
    (`native`: `native_kernels_usable`) always: they read the packed tokens where they lie and do
    a layer's elementwise work in fewer passes than the model's own modules, which pays even where
    packing saves no position (8 x 8 rows of 7 + 256 tokens, 2.4% saved: update 1.42x and
    reference 1.43x the padded forward). With torch's ops the packed forward gathers every row
    into a padded layout and back in each layer, which pays only from MIN_SAVED_SHARE saved."""
    return native or packing.num_tokens <= (1 - MIN_SAVED_SHARE) * input_ids.numel()


def native_kernels_usable(model: PreTrainedModel, mode: str) -> bool:
    """Whether `packed_logits` on `model` will run the C kernels (as it decides from its activations)."""
    return native_kernels_wanted(mode) and choice.usable(model.get_input_embeddings().weight, mode)


def packed_logits(model: PreTrainedModel, packing: Packing, kernels: str = "auto") -> torch.Tensor:
    """The model's logits [U, V] at the U distinct tokens. `kernels` (algo.packed_kernels): auto,
    torch or native (reinforge.kernels.choice)."""
    causal_lm = model.get_base_model() if is_lora_model(model) else model
    return causal_lm.lm_head(packed_hidden(model, packing, kernels))


def packed_hidden(model: PreTrainedModel, packing: Packing, kernels: str = "auto", checkpoint_layers: bool = False) -> torch.Tensor:
    """The final normed hidden states [U, H] that lm_head reads, at the U distinct tokens.
    `checkpoint_layers` (algo.activation_checkpointing): each layer's activations are recomputed
    in the backward (torch.utils.checkpoint, non-reentrant) instead of kept."""
    causal_lm = model.get_base_model() if is_lora_model(model) else model
    inner = causal_lm.model
    hidden = inner.embed_tokens(packing.token_ids)  # [U, H]
    cos, sin = inner.rotary_emb(hidden, packing.positions[None])
    cos, sin = cos[0].unsqueeze(1), signed_sin(sin[0]).unsqueeze(1)  # [U, 1, head_dim]: broadcast over heads
    native = native_kernels_usable(model, kernels)  # the same decision as token_logprobs' to pack
    checkpoint_layers = checkpoint_layers and torch.is_grad_enabled()
    # A sharded layer has `run_layer` under FSDP's hooks (reinforge.distributed.sharded_forward),
    # which free its gathered weights after the forward: its recipes could not rerun the norm there.
    sharded = any(hasattr(layer, SHARDED_LAYER_METHOD) for layer in inner.layers)
    rebuild = REBUILD_CHEAP_ACTIVATIONS and native and torch.is_grad_enabled() and not checkpoint_layers and not sharded
    with RebuiltActivations() if rebuild else contextlib.nullcontext() as rebuilt:
        for layer in inner.layers:
            step = getattr(layer, SHARDED_LAYER_METHOD, None) or functools.partial(run_layer, layer, rebuilt=rebuilt)
            if checkpoint_layers:
                hidden = torch.utils.checkpoint.checkpoint(step, hidden, cos, sin, packing, native, use_reentrant=False)
            else:
                hidden = step(hidden, cos, sin, packing, native)
    return _norm(inner.norm, hidden, native)


def run_layer(
    layer, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, packing: Packing, native: bool,
    rebuilt: RebuiltActivations | None = None,
) -> torch.Tensor:
    """One decoder layer: pre-norm attention and MLP, each added to the residual stream. With
    `rebuilt` (the C kernels' path) the norms' outputs and SiLU(gate) x up are rebuilt in the
    backward instead of kept (reinforge.learner.rebuilt_activations)."""
    normed = _norm(layer.input_layernorm, hidden, native)
    with _rebuilt_norm(rebuilt, layer.input_layernorm, hidden, normed):
        attended = _attention(layer.self_attn, normed, cos, sin, packing, native)
    hidden = hidden + attended
    normed = _norm(layer.post_attention_layernorm, hidden, native)
    with _rebuilt_norm(rebuilt, layer.post_attention_layernorm, hidden, normed):
        return hidden + _mlp(layer.mlp, normed, native, rebuilt)


def _norm(norm, x: torch.Tensor, native: bool) -> torch.Tensor:
    """The model's RMSNorm module, or its formula in C (`native`) with its weight and epsilon."""
    eps = getattr(norm, "variance_epsilon", None)
    if not native or eps is None:
        return norm(x)
    return layers.rms_norm(x, norm.weight, eps)


def _rebuilt_norm(rebuilt: RebuiltActivations | None, norm, x: torch.Tensor, normed: torch.Tensor):
    """The projections after `norm` keep the C norm's recipe (x is kept by the norm's backward)."""
    eps = getattr(norm, "variance_epsilon", None)
    if rebuilt is None or eps is None:
        return contextlib.nullcontext()
    return rebuilt.rebuilt(normed, functools.partial(layers.rms_norm_values, x, norm.weight, eps))


def _mlp(mlp, x: torch.Tensor, native: bool, rebuilt: RebuiltActivations | None = None) -> torch.Tensor:
    """The model's SwiGLU MLP module, or its projections (the model's own modules, LoRA included)
    around SiLU(gate) x up in C (`native`; `supports` checked the activation is SiLU)."""
    if not native:
        return mlp(x)
    gate, up = project(mlp.gate_proj, x), project(mlp.up_proj, x)
    activated = layers.swiglu(gate, up)
    if rebuilt is None:
        return project(mlp.down_proj, activated)
    with rebuilt.rebuilt(activated, functools.partial(layers.swiglu_values, gate, up)):  # gate, up: kept by SwiGLU's backward
        return project(mlp.down_proj, activated)


def _attention(attn, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, packing: Packing, native: bool) -> torch.Tensor:
    """Causal self-attention of the U tokens, each over its own row's keys: in C where they are
    (`native`), else through SDPA in the padded layout."""
    head_dim = attn.head_dim
    q = project(attn.q_proj, x).view(x.shape[0], -1, head_dim)  # [U, heads, head_dim]
    k = project(attn.k_proj, x).view(x.shape[0], -1, head_dim)
    v = project(attn.v_proj, x).view(x.shape[0], -1, head_dim)
    rotated = layers.rotary if native else rotate  # sin is signed_sin
    q, k = rotated(q, cos, sin), rotated(k, cos, sin)
    heads, kv_heads = q.shape[1], k.shape[1]
    if native:
        out = packed_attention.packed_attention(q, k, v, packing.rows, attn.scaling)
        return project(attn.o_proj, out.reshape(x.shape[0], heads * head_dim))

    def padded(t: torch.Tensor, source: torch.Tensor) -> torch.Tensor:  # [U, h, d] -> [R, h, T, d]
        # index_select, not t[index]: 2-3x faster forward and backward on CPU (same values)
        return t.index_select(0, source.flatten()).view(*source.shape, *t.shape[1:]).transpose(1, 2)

    # Right padding: a real query's causal window never reaches a pad, so the causal mask is the
    # mask, and what a pad slot holds (the first token's values) is never read. A slot whose token
    # another row computes holds that token's query too: attended, but its output is not used.
    outs = []
    for call in packing.calls:
        out = F.scaled_dot_product_attention(
            padded(q, call.source[:, call.offset :]), padded(k, call.source), padded(v, call.source),
            attn_mask=call.mask, is_causal=call.mask is None, scale=attn.scaling, enable_gqa=kv_heads != heads,
        )
        outs.append(out.transpose(1, 2).reshape(-1, heads, head_dim))
    out = (outs[0] if len(outs) == 1 else torch.cat(outs)).index_select(0, packing.outputs)  # [U, heads, head_dim]
    return project(attn.o_proj, out.reshape(x.shape[0], heads * head_dim))


def packed_token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    packing: Packing,
    temperature: float = 1.0,
    entropy_grad: bool = False,
    entropy: bool = True,
    kernels: str = "auto",
    chunk_tokens: int | None = None,
    checkpoint_layers: bool = False,
    needed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_logprobs` (reinforge.learner.logprobs) through `packing`: [N, T-1] each.

    With `chunk_tokens` the log-softmax runs on the hidden states that many distinct tokens at a
    time (reinforge.learner.chunked_logprobs; the caller checks that the model's lm_head is a
    plain linear layer); a shared token's hidden state is read by each row that predicts from it."""
    predicts = attention_mask[:, 1:].bool()  # position t predicts a real token t+1
    if needed is not None and chunk_tokens is not None:
        predicts = predicts & needed
    where = predicts.nonzero(as_tuple=True)
    source = packing.source[:, :-1][where]
    targets = input_ids[:, 1:][where]
    if chunk_tokens is not None:
        causal_lm = model.get_base_model() if is_lora_model(model) else model
        head = causal_lm.get_output_embeddings()
        # only the distinct tokens some row predicts from (a row's last token predicts nothing)
        used, source = torch.unique(source, return_inverse=True)
        hidden = packed_hidden(model, packing, kernels, checkpoint_layers).index_select(0, used)
        chosen, per_token = chunked_token_logprobs(
            hidden, head.weight, head.bias, source, targets, temperature, chunk_tokens, entropy,
            entropy_grad and torch.is_grad_enabled(),
        )
        chosen = chosen.new_zeros(predicts.shape).index_put(where, chosen)
        if not entropy:
            return chosen, None
        return chosen, per_token.new_zeros(predicts.shape).index_put(where, per_token[source])
    causal_lm = model.get_base_model() if is_lora_model(model) else model
    logits = causal_lm.lm_head(packed_hidden(model, packing, kernels, checkpoint_layers)).float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = logits.log_softmax(-1)  # [U, V]
    chosen = log_probs.new_zeros(predicts.shape).index_put(where, log_probs[source, targets])
    if not entropy:
        return chosen, None
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        per_token = -(log_probs.exp() * log_probs).sum(-1)
        entropies = per_token.new_zeros(predicts.shape).index_put(where, per_token[source])
    return chosen, entropies
