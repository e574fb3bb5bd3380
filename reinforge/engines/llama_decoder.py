"""An inference-only Llama forward with a preallocated KV cache, for fast batched sampling.

Why not `model(...)` per token: for the small models RL research iterates on, a decode step is
dominated by per-call overhead (mask building, cache objects, output classes, hooks), not by
matmuls. This file re-expresses the same math (RMSNorm, rotary attention with grouped KV heads,
SwiGLU MLP) over fused weight matrices and a cache written in place, reusing the model's own
rotary embedding so every RoPE variant it supports is computed exactly as in `transformers`.
The learner calls the model's own modules (its forward, or reinforge.learner.packed_forward); a
test checks that the two agree.

Per-step costs kept small without changing a bit of the output: rotary cos/sin tabulated once
per batch, prompt pads and tokens that rows share kept out of the matmuls (in batches of 64+ real
tokens; a shared token's keys and values are copied), a float mask built once. On a CPU in
float32 (`engine.decode_kernels`) a step's attention, RMSNorm, rotary and SwiGLU run in C
(reinforge.kernels: torch's fixed cost per op and, in SDPA, per row and head, is most of their
time at these sizes; the same math to float rounding), elsewhere in torch's ops and
`scaled_dot_product_attention`; there a model too large to stay in cache also multiplies weights
laid out once in prefetched column panels (reinforge.kernels.decode_gemm), not through torch's GEMM. A long prompt that a group's rows share is cached once and read
once per group (`prefill_shared`, `shared_prompt_attention`: batched matmuls, which
pay there, at float rounding).
`benchmarks/rollout_throughput.py` measures the engine against `generate`.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from reinforge.engines.borrowed_weights import joined_linear
from reinforge.engines.rotary import rotate, signed_sin
from reinforge.engines.shared_prefixes import first_rows_with_prefix
from reinforge.engines.shared_prompt_attention import shared_prompt_attention
from reinforge.kernels import choice, decode_attention, decode_gemm, layers

logger = logging.getLogger(__name__)

SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2"}
MIN_PACKED_TOKENS = 64  # prompt batches with fewer real tokens run their pads through the matmuls too
KERNEL_SOURCES = (decode_attention.SOURCE, layers.SOURCE)


def unsupported_reason(model: PreTrainedModel) -> str | None:
    """Why the fused decoder cannot run `model` exactly as its `transformers` forward does, or None.

    It runs Llama-family decoders: RMSNorm, rotary attention with any number of query heads per
    key/value head (grouped-query attention), SwiGLU, biases on any projection (Qwen2's q, k, v;
    Llama's attention_bias / mlp_bias), tied or separate embeddings, each layer's own attention
    `scaling`, and every RoPE variant the model's own `rotary_emb` computes (default, linear,
    llama3, yarn, dynamic, longrope: cos, sin and their attention scaling are taken from the
    module, never re-derived). It does not run sliding-window attention or another activation;
    such a model samples through the engine's `transformers` fallback (HFDecoder)."""
    config = model.config
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        return f"model_type {config.model_type!r} is not one of {sorted(SUPPORTED_MODEL_TYPES)}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"hidden_act {config.hidden_act!r}: the fused MLP is SwiGLU (silu)"
    window = getattr(config, "sliding_window", None)
    context = getattr(config, "max_position_embeddings", None)
    # A window as long as the context never binds: that is full attention (Qwen2 configs that keep
    # `sliding_window` with use_sliding_window false, Mistral ones with window = context).
    if window is not None and (context is None or window < context):
        return f"sliding-window attention (sliding_window={window} < max_position_embeddings={context})"
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if layer_types != {"full_attention"}:
        return f"layer_types {sorted(layer_types)}: only full attention is fused"
    inner = getattr(model, "model", None)
    rotary = getattr(inner, "rotary_emb", None)
    if rotary is None or not isinstance(getattr(rotary, "rope_type", "default"), str):
        return "no single rotary_emb module to take cos and sin from (per-layer-type RoPE)"
    for layer in inner.layers:
        attn = layer.self_attn
        if not all(hasattr(attn, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling", "head_dim")):
            return f"attention module {type(attn).__name__} is not a Llama-style one (q/k/v/o projections, scaling, head_dim)"
    return None


def supports(model: PreTrainedModel) -> bool:
    return unsupported_reason(model) is None


@dataclass
class _Layer:
    input_norm: torch.Tensor
    qkv_weight: torch.Tensor | tuple[torch.Tensor, ...]  # a tuple: parts (joined_linear)
    qkv_bias: torch.Tensor | tuple[torch.Tensor, ...] | None
    o_weight: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up_weight: torch.Tensor | tuple[torch.Tensor, ...]
    gate_up_bias: torch.Tensor | tuple[torch.Tensor, ...] | None
    down_weight: torch.Tensor
    down_bias: torch.Tensor | None
    scaling: float  # the attention's softmax scale (attn.scaling: head_dim**-0.5 in Llama, Qwen2, Mistral)


@dataclass
class SharedPrompt:
    """The prompt of `group_size` consecutive rows, cached once for all of them."""

    keys: list[torch.Tensor]  # per layer [D, kv_heads, P, head_dim], D = rows / group_size
    values: list[torch.Tensor]
    key_bias: torch.Tensor  # [D, 1, 1, P]: 0 on the prompt's tokens, -inf on its left pads
    group_size: int

    @property
    def length(self) -> int:
        return self.key_bias.shape[-1]


@dataclass
class DecodeState:
    """Per-row cache and bookkeeping; rows can be dropped as they finish (`keep`).

    With `shared` set, the rows' prompts sit in it, once per group, and `keys` / `values` hold
    only the sampled tokens (slots from `shared.length` on); `key_bias` covers both."""

    keys: list[torch.Tensor]  # per layer [B, kv_heads, max_len, head_dim] ([B, kv_heads, max_len - P, head_dim] when shared)
    values: list[torch.Tensor]
    key_bias: torch.Tensor  # [B, 1, 1, max_len] additive mask: 0 on real tokens (prompt and sampled), -inf on pads
    next_position: torch.Tensor  # [B] rotary position of the next token
    rope: torch.Tensor | None  # [max_len, 2 * head_dim]: cos | signed sin of every position (static RoPE only)
    length: int  # cache slots used
    shared: SharedPrompt | None = None

    def cache_bytes(self) -> int:
        """Bytes the keys and values hold (a shared prompt's once): at most
        reinforge.engines.kv_cache.kv_cache_bytes of the call's rows and tokens."""
        tensors = self.keys + self.values + ([] if self.shared is None else self.shared.keys + self.shared.values)
        return sum(t.numel() * t.element_size() for t in tensors)

    def keep(self, rows: torch.Tensor) -> None:
        # Layer by layer, each old tensor dropped once its replacement exists: the cache never
        # holds more than its old size plus one layer's new tensor (reinforge.engines.kv_cache).
        shared, self.shared = self.shared, None
        for cache, prompts in ((self.keys, None if shared is None else shared.keys), (self.values, None if shared is None else shared.values)):
            for i in range(len(cache)):
                if prompts is None:
                    cache[i] = cache[i].index_select(0, rows)
                else:  # the kept rows no longer come in groups: each gets its prompt back
                    cache[i] = torch.cat([prompts[i].index_select(0, rows // shared.group_size), cache[i].index_select(0, rows)], dim=2)
                    prompts[i] = None
        self.key_bias = self.key_bias.index_select(0, rows)
        self.next_position = self.next_position.index_select(0, rows)


@dataclass
class _Prompt:
    """Where the N computed tokens of a left-padded prompt batch [B, T] sit (row-major order)."""

    rows: torch.Tensor  # [N] batch row of each token
    cols: torch.Tensor  # [N] column (cache slot) of each token
    last: torch.Tensor  # [B] index, among the N tokens, of each row's last one (or of the same token in an earlier row)
    mask: torch.Tensor  # [B, 1, T, T] bool attention mask
    # (rows, cols) of tokens an earlier row computes, and (rows, cols) of that row's same token:
    # their keys and values are copied from it, layer by layer
    copies: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None


class FusedLlamaDecoder:
    can_drop_rows = True

    def __init__(self, model: PreTrainedModel, dtype: torch.dtype = torch.float32, decode_kernels: str = "auto"):
        """`decode_kernels` (engine.decode_kernels): auto, torch or native; whether a CPU float32
        step runs its attention, RMSNorm, rotary and SwiGLU in C (reinforge.kernels) or in torch."""
        reason = unsupported_reason(model)
        if reason is not None:
            raise ValueError(f"FusedLlamaDecoder cannot run this model: {reason}; TorchEngine samples it through transformers instead")
        config = model.config
        self.dtype = dtype
        self.decode_kernels = decode_kernels
        on_cpu = next(model.parameters()).device.type == "cpu"
        self.native = on_cpu and dtype == torch.float32 and choice.wanted(decode_kernels, "engine.decode_kernels", KERNEL_SOURCES)
        # A model too large to stay in cache multiplies its weights laid out in panels
        # (reinforge.kernels.decode_gemm); a small one keeps torch's GEMM and its exact rounding.
        weight_bytes = sum(p.numel() for p in model.parameters()) * torch.empty((), dtype=dtype).element_size()
        self.panel_gemm = (
            self.native
            and choice.usable(torch.empty(0, dtype=dtype), decode_kernels)
            and weight_bytes >= decode_gemm.MIN_STREAMED_BYTES
            and decode_gemm.available()
        )
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = model.model.layers[0].self_attn.head_dim
        self.eps = config.rms_norm_eps
        self.rotary = model.model.rotary_emb
        # Dynamic RoPE variants rescale their frequencies from the longest position seen in each
        # call, so only static ones can be tabulated once per batch.
        rope_type = getattr(self.rotary, "rope_type", "default")
        self.static_rope = isinstance(rope_type, str) and "dynamic" not in rope_type and rope_type != "longrope"
        # Those two switch frequencies by the longest position of a call, so past the original
        # context a cached key keeps the frequencies it was rotated with while a full forward
        # (the learner's) rotates every position with the longest's: incremental decoding (here
        # and in transformers) then differs from the learner (`prefill` warns).
        self.original_context = None if self.static_rope else _original_context(config)

        self._take_weights(model)

    # How the decoder holds the model's weights: copies in its own dtype and layout (here), so an
    # optimizer step never changes what a given policy version samples; or the model's own tensors
    # (reinforge.engines.borrowed_decoder, a sharded learner's rank 0: no second full copy).

    def _vector(self, t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.detach().to(self.dtype, copy=True)

    def _weight(self, module: torch.nn.Module):
        return module.weight  # of one of a layer's projections (a borrowing decoder reads a LoRA layer unmerged)

    def _matrix(self, t: torch.Tensor) -> torch.Tensor | decode_gemm.PanelMatrix:
        if self.panel_gemm:
            return decode_gemm.PanelMatrix(t.detach().to(self.dtype))
        # A copy laid out [in, out] and viewed back as [out, in]: F.linear then multiplies by a
        # contiguous [in, out] matrix, which the CPU GEMM takes without re-packing a transposed
        # one at every decode step (a 64-row step's matmuls 1.1-1.5x faster on their own).
        return t.detach().t().to(self.dtype).contiguous().t()

    def _joined_matrix(self, parts: list[torch.Tensor]):
        """Projections that read the same input (q, k, v; gate, up) as one matrix: one matmul."""
        return self._matrix(torch.cat(parts))

    def _joined_vector(self, parts: list[torch.Tensor | None]):
        return None if parts[0] is None else self._vector(torch.cat(parts))

    def _take_weights(self, model: PreTrainedModel) -> None:
        self.layers = []
        for layer in model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            # Llama's attention_bias / mlp_bias also put biases on o_proj and the MLP; qwen2 only on q, k, v.
            self.layers.append(
                _Layer(
                    input_norm=self._vector(layer.input_layernorm.weight),
                    qkv_weight=self._joined_matrix([self._weight(attn.q_proj), self._weight(attn.k_proj), self._weight(attn.v_proj)]),
                    qkv_bias=self._joined_vector([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]),
                    o_weight=self._matrix(self._weight(attn.o_proj)),
                    o_bias=self._vector(attn.o_proj.bias),
                    post_norm=self._vector(layer.post_attention_layernorm.weight),
                    gate_up_weight=self._joined_matrix([self._weight(mlp.gate_proj), self._weight(mlp.up_proj)]),
                    gate_up_bias=self._joined_vector([mlp.gate_proj.bias, mlp.up_proj.bias]),
                    down_weight=self._matrix(self._weight(mlp.down_proj)),
                    down_bias=self._vector(mlp.down_proj.bias),
                    scaling=float(attn.scaling),
                )
            )
        self.final_norm = self._vector(model.model.norm.weight)
        self.lm_head = self._matrix(model.lm_head.weight)
        embed = model.model.embed_tokens.weight
        # Tied embeddings (SmolLM2, Qwen2-0.5B): one copy serves both, [V, H] read as a strided
        # view of the [H, V] matrix (an embedding lookup gathers a few rows either way; for
        # SmolLM2 the second copy would be 113 MB).
        self.tied = embed.data_ptr() == model.lm_head.weight.data_ptr() and embed.shape == model.lm_head.weight.shape
        self.embed = self.lm_head if self.tied else self._vector(embed)
        if self.panel_gemm:  # a decode step's order of matmuls: each prefetches the next one's first panel
            decode_gemm.chain([m for layer in self.layers for m in (layer.qkv_weight, layer.o_weight, layer.gate_up_weight, layer.down_weight)] + [self.lm_head])

    def _embedding(self, ids: torch.Tensor) -> torch.Tensor:
        if isinstance(self.embed, decode_gemm.PanelMatrix):  # a tied LM head in panels
            return self.embed.rows(ids)
        return F.embedding(ids, self.embed)

    @staticmethod
    def _linear(x: torch.Tensor, weight, bias: torch.Tensor | None) -> torch.Tensor:
        if isinstance(weight, decode_gemm.PanelMatrix):
            return decode_gemm.linear(x, weight, bias)
        return joined_linear(x, weight, bias)

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor, native: bool = False) -> torch.Tensor:
        if native:  # CPU float32 (`usable`), contiguous: embeddings, residual sums
            return layers.rms_norm_rows(x, weight, self.eps)
        if x.dtype == torch.float32:  # fewer dispatches, bit-identical to the formula below
            return F.rms_norm(x, weight.shape, weight, self.eps)
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x32.to(x.dtype)

    def _rope(self, positions: torch.Tensor, state: DecodeState) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (for `rotate`) at token positions [N], shaped [N, 1, head_dim]
        (broadcast over heads)."""
        if state.rope is not None:
            cos, sin = F.embedding(positions, state.rope).unsqueeze(1).chunk(2, dim=-1)
            return cos, sin
        cos, sin = self.rotary(torch.empty(0, dtype=self.dtype, device=positions.device), positions[None])
        return cos[0].unsqueeze(1), signed_sin(sin[0]).unsqueeze(1)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, state: DecodeState, prompt: _Prompt | None) -> torch.Tensor:
        """Run tokens `ids` [N] through the layers, writing their keys and values to the cache.

        A decode step (`prompt` is None) has one token per row, at cache slot `state.length`.
        A prompt batch passes its real tokens (pads too, for tiny batches) and `prompt` says where
        each sits in the left-padded [B, T] layout that attention and the cache use.
        Returns the last hidden state of each row [B, H].
        """
        heads, kv_heads, head_dim = self.heads, self.kv_heads, self.head_dim
        q_size, kv_size = heads * head_dim, kv_heads * head_dim
        start = state.length
        end = start + (1 if prompt is None else prompt.mask.shape[-1])
        hidden = self._embedding(ids)
        cos, sin = self._rope(positions, state)
        native = self.native and choice.usable(hidden, self.decode_kernels)
        for i, layer in enumerate(self.layers):
            x = self._rms_norm(hidden, layer.input_norm, native)
            qkv = self._linear(x, layer.qkv_weight, layer.qkv_bias)
            # q and k rotated together: [N, heads + kv_heads, head_dim]
            if native:
                qk = layers.rotary_rows(qkv, heads + kv_heads, head_dim, cos, sin)
            else:
                qk = rotate(qkv[:, : q_size + kv_size].view(-1, heads + kv_heads, head_dim), cos, sin)
            q, k = qk[:, :heads], qk[:, heads:]
            v = qkv[:, q_size + kv_size :].view(-1, kv_heads, head_dim)
            attn = self._attention(i, q, k, v, state, prompt, start, end, native)  # [N, heads, head_dim]
            hidden = hidden + self._linear(attn.reshape(-1, q_size), layer.o_weight, layer.o_bias)
            x = self._rms_norm(hidden, layer.post_norm, native)
            gate_up = self._linear(x, layer.gate_up_weight, layer.gate_up_bias)
            if native:
                activated = layers.swiglu_halves(gate_up)
            else:
                gate, up = gate_up.chunk(2, dim=-1)
                activated = F.silu(gate).mul_(up)
            hidden = hidden + self._linear(activated, layer.down_weight, layer.down_bias)
        state.length = end
        return hidden if prompt is None else hidden[prompt.last]

    def _attention(self, i: int, q, k, v, state: DecodeState, prompt: _Prompt | None, start: int, end: int, native: bool) -> torch.Tensor:
        """Write layer i's keys and values of the N tokens to the cache; their attention outputs [N, heads, head_dim]
        (a decode step's in C where `native`)."""
        keys, values = state.keys[i], state.values[i]
        scale = self.layers[i].scaling
        if prompt is None and state.shared is not None:
            slot = start - state.shared.length  # sampled tokens only in the rows' own cache
            keys[:, :, slot] = k
            values[:, :, slot] = v
            shared = state.shared
            return shared_prompt_attention(
                q, shared.keys[i], shared.values[i], shared.key_bias, keys[:, :, : slot + 1], values[:, :, : slot + 1], scale
            )
        if prompt is None:
            keys[:, :, start] = k
            values[:, :, start] = v
            if native:
                return decode_attention.decode_attention(q, keys, values, state.key_bias, end, scale)
            q = q.unsqueeze(2)  # [B, heads, 1, head_dim]
            mask = state.key_bias[..., :end]
        else:
            for cache, new in ((keys.transpose(1, 2), k), (values.transpose(1, 2), v)):
                cache[prompt.rows, prompt.cols] = new
                if prompt.copies is not None:
                    rows, cols, from_rows, from_cols = prompt.copies
                    cache[rows, cols] = cache[from_rows, from_cols]
            padded = q.new_zeros(prompt.mask.shape[0], end, self.heads, self.head_dim)
            padded[prompt.rows, prompt.cols] = q
            q, mask = padded.transpose(1, 2), prompt.mask
        attn = F.scaled_dot_product_attention(
            q, keys[:, :, :end], values[:, :, :end], attn_mask=mask, scale=scale, enable_gqa=self.kv_heads != self.heads
        ).transpose(1, 2)  # [B, T, heads, head_dim]
        return attn[:, 0] if prompt is None else attn[prompt.rows, prompt.cols]

    def _logits(self, last_hidden: torch.Tensor) -> torch.Tensor:
        native = self.native and choice.usable(last_hidden, self.decode_kernels)
        return self._linear(self._rms_norm(last_hidden.contiguous(), self.final_norm, native), self.lm_head, None).float()

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int) -> tuple[torch.Tensor, DecodeState]:
        """Left-padded prompts [B, P] -> next-token logits [B, V] and a cache with room for the
        rest: B x (P + max_new_tokens) slots per layer, the call's own size (reinforge.engines.kv_cache)."""
        return self._prefill(input_ids, attention_mask, max_new_tokens, max_new_tokens)

    def _prefill(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, cache_new_tokens: int
    ) -> tuple[torch.Tensor, DecodeState]:
        """`prefill` with room for `cache_new_tokens` sampled tokens in the cache (0: the prompt
        only, for `prefill_shared`) and rotary positions for `max_new_tokens`."""
        batch, prompt_len = input_ids.shape
        max_len = prompt_len + max_new_tokens
        cache_len = prompt_len + cache_new_tokens
        device = input_ids.device  # the model's (TorchEngine puts the prompts there)
        shape = (batch, self.kv_heads, cache_len, self.head_dim)
        valid = attention_mask.bool()
        key_valid = torch.cat([valid, torch.ones(batch, cache_new_tokens, dtype=torch.bool, device=device)], dim=1)
        key_bias = torch.zeros(batch, cache_len, dtype=self.dtype, device=device).masked_fill_(~key_valid, float("-inf"))
        rope = None
        if self.static_rope:  # positions never reach max_len: a row's position is at most its slot
            cos, sin = self.rotary(torch.empty(0, dtype=self.dtype, device=device), torch.arange(max_len, device=device)[None])
            rope = torch.cat([cos[0], signed_sin(sin[0])], dim=-1)
        elif self.original_context is not None and max_len > self.original_context:
            _warn_past_original_context(self.rotary.rope_type, max_len, self.original_context)

        def cache() -> torch.Tensor:
            # Pad slots are masked out, but must hold finite numbers: 0 * NaN would still be NaN.
            t = torch.empty(shape, dtype=self.dtype, device=device)
            t[:, :, :prompt_len] = 0
            return t

        state = DecodeState(
            keys=[cache() for _ in self.layers],
            values=[cache() for _ in self.layers],
            key_bias=key_bias[:, None, None, :],
            next_position=valid.sum(1),
            rope=rope,
            length=0,
        )
        causal = torch.ones(prompt_len, prompt_len, dtype=torch.bool, device=device).tril()
        # Pad queries attend to themselves only, so no softmax row is empty (which would be NaN).
        mask = (causal & valid[:, None, :]) | torch.eye(prompt_len, dtype=torch.bool, device=device)
        prompt = _plan_prompt(input_ids, valid, mask[:, None])
        rows, cols = prompt.rows, prompt.cols
        positions = (valid.long().cumsum(1) - 1).clamp(min=0)[rows, cols]
        last = self._forward(input_ids[rows, cols], positions, state, prompt)
        return self._logits(last), state

    def prefill_shared(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, group_size: int, max_new_tokens: int
    ) -> tuple[torch.Tensor, DecodeState]:
        """`prefill` of D distinct left-padded prompts [D, P] for D x `group_size` rows (row r
        samples prompt r // group_size): each prompt is computed and cached once, and every decode
        step reads it once per group (shared_prompt_attention). -> logits [D x group_size, V].
        The cache: D x P prompt slots and D x group_size x max_new_tokens sampled ones per layer."""
        logits, prompts = self._prefill(input_ids, attention_mask, max_new_tokens, 0)
        prompt_len = input_ids.shape[1]
        rows = input_ids.shape[0] * group_size
        shared = SharedPrompt(keys=prompts.keys, values=prompts.values, key_bias=prompts.key_bias, group_size=group_size)
        shape = (rows, self.kv_heads, max_new_tokens, self.head_dim)
        key_bias = torch.cat([prompts.key_bias, prompts.key_bias.new_zeros(prompts.key_bias.shape[:-1] + (max_new_tokens,))], dim=-1)
        state = DecodeState(
            keys=[torch.empty(shape, dtype=self.dtype, device=input_ids.device) for _ in self.layers],
            values=[torch.empty(shape, dtype=self.dtype, device=input_ids.device) for _ in self.layers],
            key_bias=key_bias.repeat_interleave(group_size, dim=0),
            next_position=prompts.next_position.repeat_interleave(group_size),
            rope=prompts.rope,
            length=prompt_len,
            shared=shared,
        )
        return logits.repeat_interleave(group_size, dim=0), state

    def step(self, tokens: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """Append one token per row [B]; return next-token logits [B, V]."""
        last = self._forward(tokens, state.next_position, state, None)
        state.next_position = state.next_position + 1
        return self._logits(last)


def _original_context(config) -> int | None:
    """The context a dynamic / longrope model was trained at (its RoPE switches past it)."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return rope.get("original_max_position_embeddings") or getattr(config, "max_position_embeddings", None)


@functools.cache
def _warn_past_original_context(rope_type: str, length: int, context: int) -> None:
    logger.warning(
        "RoPE %r past the original context (%d > %d positions): cached keys keep the frequencies they were "
        "rotated with, so the engine's behaviour log-probs differ from the learner's full-sequence forward "
        "(as in transformers' own generate); keep prompt + rollout.max_new_tokens within %d",
        rope_type, length, context, context,
    )


def _plan_prompt(input_ids: torch.Tensor, valid: torch.Tensor, mask: torch.Tensor) -> _Prompt:
    """Which tokens of left-padded prompts [B, P] the prefill computes: each real token once, in
    the first row whose prompt starts with the same tokens up to it (a group's G rows share their
    prompt, the rows of a multi-turn group their first turns); the other rows copy its keys and
    values. Pads are skipped too, but only when enough real tokens remain: BLAS rounds a row the
    same way whatever the row count except for tiny counts (other kernels), so outputs stay
    bit-identical either way."""
    batch, width = input_ids.shape
    device = input_ids.device
    start = width - valid.sum(1)  # column of each row's first real token
    offset = torch.arange(width, device=device)
    aligned_valid = offset[None] < valid.sum(1)[:, None]  # [B, P] by position in the prompt
    aligned = input_ids.gather(1, (start[:, None] + offset[None]).clamp(max=width - 1))
    owner = first_rows_with_prefix(aligned, aligned_valid)  # by position
    at_column = (offset[None] - start[:, None]).clamp(min=0)  # position of each column's token
    owner = owner.gather(1, at_column)  # by column (any row on pads)
    computed = valid & (owner == torch.arange(batch, device=device)[:, None])
    copies = None
    if computed.sum() < MIN_PACKED_TOKENS:
        computed, owner = (valid if valid.sum() >= MIN_PACKED_TOKENS else torch.ones_like(valid)), None
    elif not torch.equal(computed, valid):
        rows, cols = (valid & ~computed).nonzero(as_tuple=True)
        from_rows = owner[rows, cols]
        copies = (rows, cols, from_rows, start[from_rows] + cols - start[rows])
    index = computed.flatten().cumsum(0).view(batch, width) - 1
    rows, cols = computed.nonzero(as_tuple=True)
    if owner is None:
        last = index[:, -1]
    else:  # the last column holds each row's last token; its keeper is `owner`, at the same position
        keeper = owner[:, -1]
        last = index[keeper, start[keeper] + width - 1 - start]
    return _Prompt(rows, cols, last=last, mask=mask, copies=copies)
