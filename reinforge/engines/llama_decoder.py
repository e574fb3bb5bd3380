"""An inference-only Llama forward with a preallocated KV cache, for fast batched sampling.

Why not `model(...)` per token: for the small models RL research iterates on, a decode step is
dominated by per-call overhead (mask building, cache objects, output classes, hooks), not by
matmuls. This file re-expresses the same math (RMSNorm, rotary attention with grouped KV heads,
SwiGLU MLP) over fused weight matrices and a cache written in place, reusing the model's own
rotary embedding so every RoPE variant it supports is computed exactly as in `transformers`.
The learner always uses the real `transformers` forward; a test checks the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

SUPPORTED_MODEL_TYPES = {"llama", "mistral", "qwen2"}


def supports(model: PreTrainedModel) -> bool:
    config = model.config
    return (
        config.model_type in SUPPORTED_MODEL_TYPES
        and getattr(config, "hidden_act", "silu") == "silu"
        and not getattr(config, "use_sliding_window", False)
        and getattr(config, "sliding_window", None) is None
    )


@dataclass
class _Layer:
    input_norm: torch.Tensor
    qkv_weight: torch.Tensor
    qkv_bias: torch.Tensor | None
    o_weight: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up_weight: torch.Tensor
    gate_up_bias: torch.Tensor | None
    down_weight: torch.Tensor
    down_bias: torch.Tensor | None


@dataclass
class DecodeState:
    """Per-row cache and bookkeeping; rows can be dropped as they finish (`keep`)."""

    keys: list[torch.Tensor]  # per layer [B, kv_heads, max_len, head_dim]
    values: list[torch.Tensor]
    key_valid: torch.Tensor  # [B, max_len] bool: real (non-pad) positions written so far
    next_position: torch.Tensor  # [B] rotary position of the next token
    length: int  # cache slots used

    def keep(self, rows: torch.Tensor) -> None:
        self.keys = [k.index_select(0, rows) for k in self.keys]
        self.values = [v.index_select(0, rows) for v in self.values]
        self.key_valid = self.key_valid.index_select(0, rows)
        self.next_position = self.next_position.index_select(0, rows)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class FusedLlamaDecoder:
    can_drop_rows = True

    def __init__(self, model: PreTrainedModel, dtype: torch.dtype = torch.float32):
        if not supports(model):
            raise ValueError(f"FusedLlamaDecoder does not support model_type={model.config.model_type!r}")
        config = model.config
        self.dtype = dtype
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        self.rotary = model.model.rotary_emb

        def w(t: torch.Tensor | None) -> torch.Tensor | None:
            # A copy, so an optimizer step never changes what a given policy version samples.
            return None if t is None else t.detach().to(dtype, copy=True)

        self.layers = []
        for layer in model.model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            # Llama's attention_bias / mlp_bias also put biases on o_proj and the MLP; qwen2 only on q, k, v.
            biases = [attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]
            gate_up_bias = None if mlp.gate_proj.bias is None else torch.cat([mlp.gate_proj.bias, mlp.up_proj.bias])
            self.layers.append(
                _Layer(
                    input_norm=w(layer.input_layernorm.weight),
                    qkv_weight=w(torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])),
                    qkv_bias=None if biases[0] is None else w(torch.cat(biases)),
                    o_weight=w(attn.o_proj.weight),
                    o_bias=w(attn.o_proj.bias),
                    post_norm=w(layer.post_attention_layernorm.weight),
                    gate_up_weight=w(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight])),
                    gate_up_bias=w(gate_up_bias),
                    down_weight=w(mlp.down_proj.weight),
                    down_bias=w(mlp.down_proj.bias),
                )
            )
        self.embed = w(model.model.embed_tokens.weight)
        self.final_norm = w(model.model.norm.weight)
        self.lm_head = w(model.lm_head.weight)

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x32.to(x.dtype)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, state: DecodeState, attn_mask: torch.Tensor) -> torch.Tensor:
        """Run `ids` [B, T] at cache slots [state.length, state.length + T); return last hidden [B, H]."""
        batch, steps = ids.shape
        start, end = state.length, state.length + steps
        hidden = F.embedding(ids, self.embed)
        cos, sin = self.rotary(hidden, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for i, layer in enumerate(self.layers):
            x = self._rms_norm(hidden, layer.input_norm)
            qkv = F.linear(x, layer.qkv_weight, layer.qkv_bias)
            q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
            q = q.view(batch, steps, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
            v = v.view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            state.keys[i][:, :, start:end] = k
            state.values[i][:, :, start:end] = v
            attn = F.scaled_dot_product_attention(
                q,
                state.keys[i][:, :, :end],
                state.values[i][:, :, :end],
                attn_mask=attn_mask,
                enable_gqa=self.kv_heads != self.heads,
            )
            hidden = hidden + F.linear(attn.transpose(1, 2).reshape(batch, steps, q_size), layer.o_weight, layer.o_bias)
            x = self._rms_norm(hidden, layer.post_norm)
            gate, up = F.linear(x, layer.gate_up_weight, layer.gate_up_bias).chunk(2, dim=-1)
            hidden = hidden + F.linear(F.silu(gate) * up, layer.down_weight, layer.down_bias)
        state.length = end
        return hidden[:, -1]

    def _logits(self, last_hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self._rms_norm(last_hidden, self.final_norm), self.lm_head).float()

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int) -> tuple[torch.Tensor, DecodeState]:
        """Left-padded prompts [B, P] -> next-token logits [B, V] and a cache with room for the rest."""
        batch, prompt_len = input_ids.shape
        max_len = prompt_len + max_new_tokens
        shape = (batch, self.kv_heads, max_len, self.head_dim)
        valid = attention_mask.bool()
        state = DecodeState(
            keys=[torch.empty(shape, dtype=self.dtype) for _ in self.layers],
            values=[torch.empty(shape, dtype=self.dtype) for _ in self.layers],
            key_valid=torch.cat([valid, torch.zeros(batch, max_new_tokens, dtype=torch.bool)], dim=1),
            next_position=valid.sum(1),
            length=0,
        )
        positions = (valid.long().cumsum(1) - 1).clamp(min=0)
        causal = torch.ones(prompt_len, prompt_len, dtype=torch.bool).tril()
        # Pad queries attend to themselves only, so no softmax row is empty (which would be NaN).
        mask = (causal & valid[:, None, :]) | torch.eye(prompt_len, dtype=torch.bool)
        last = self._forward(input_ids, positions, state, mask[:, None])
        return self._logits(last), state

    def step(self, tokens: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """Append one token per row [B]; return next-token logits [B, V]."""
        state.key_valid[:, state.length] = True
        mask = state.key_valid[:, None, None, : state.length + 1]
        last = self._forward(tokens[:, None], state.next_position[:, None], state, mask)
        state.next_position = state.next_position + 1
        return self._logits(last)
