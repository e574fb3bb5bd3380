"""How many bytes an engine's key/value cache takes: for the memory preflight, before any model is loaded.

A causal LM's cache holds, for every layer, a key and a value vector per (row, token slot, key/value
head): 2 x layers x rows x tokens x kv_heads x head_dim numbers. With grouped-query attention
(SmolLM2-135M: 9 query heads share 3 key/value heads) only the key/value heads count.
TorchEngine's fused decoder allocates exactly this at the start of a `generate` call, for the rows
of one batch (at most `engine.max_batch_size`) and tokens = the longest prompt of the batch + the
call's max_new_tokens (its largest per-row budget when smaller). When the batch's rows come in
groups that share one prompt of min_shared_prompt+ tokens (a GRPO group), the fused decoder holds
that prompt once per group (`FusedLlamaDecoder.prefill_shared`): `shared_prompt_kv_cache_bytes`.
As rows finish, the cache shrinks to the rows still sampling (half or fewer of them), one layer at a
time. The `transformers` fallback's cache grows to the same size as `kv_cache_bytes`. Not counted:
the prefill's activations and the engine's copy of the weights.
"""

from __future__ import annotations

import torch

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def kv_cache_bytes(config, rows: int, tokens: int, dtype: torch.dtype | str = torch.float32) -> int:
    """Bytes of the KV cache of `rows` sequences of `tokens` slots each (prompt + new tokens) for a
    model with `config` (a transformers config, or any object with its attributes: num_hidden_layers,
    num_attention_heads, hidden_size, and optionally num_key_value_heads, head_dim), in `dtype`
    (torch.float32 / torch.bfloat16, or the `engine.dtype` name "float32" / "bfloat16").

        2 (keys, values) x num_hidden_layers x rows x tokens x kv_heads x head_dim x bytes per number

    kv_heads = num_key_value_heads (default num_attention_heads); head_dim = config.head_dim
    (default hidden_size // num_attention_heads). SmolLM2-135M (30 layers, 3 kv heads of 64),
    32 rows x 192 tokens in float32: 2 x 30 x 32 x 192 x 3 x 64 x 4 = 283 MB.
    """
    if rows < 0 or tokens < 0:
        raise ValueError(f"kv_cache_bytes needs rows >= 0 and tokens >= 0, got rows={rows}, tokens={tokens}")
    if isinstance(dtype, str):
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"kv_cache_bytes: dtype {dtype!r} is not one of {sorted(DTYPE_BYTES)}")
        size = DTYPE_BYTES[dtype]
    else:
        size = torch.empty((), dtype=dtype).element_size()
    try:
        layers, heads = config.num_hidden_layers, config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    except AttributeError as error:
        raise ValueError(f"kv_cache_bytes needs a decoder config (num_hidden_layers, num_attention_heads, hidden_size): {error}") from None
    return 2 * layers * rows * tokens * kv_heads * head_dim * size


def shared_prompt_kv_cache_bytes(
    config, groups: int, group_size: int, prompt_tokens: int, new_tokens: int, dtype: torch.dtype | str = torch.float32
) -> int:
    """Peak bytes of the fused decoder's cache for `groups` x `group_size` rows whose groups each
    share a prompt of `prompt_tokens` (the longest, left pads included), `new_tokens` sampled per row.

    While all rows sample: each group's prompt once and each row's own sampled tokens,
        kv_cache_bytes(groups, prompt) + kv_cache_bytes(groups x group_size, new).
    Once half the rows or more have finished, the kept rows (at most half) get their own copy of
    the prompt back: kv_cache_bytes(groups x group_size // 2, prompt + new), built layer by layer
    while the old layout is freed, so the switch holds the larger of the two plus one layer of the
    new one. The peak is the larger of the two layouts plus that one layer.
    """
    rows = groups * group_size
    shared = kv_cache_bytes(config, groups, prompt_tokens, dtype) + kv_cache_bytes(config, rows, new_tokens, dtype)
    kept = kv_cache_bytes(config, rows // 2, prompt_tokens + new_tokens, dtype)
    return max(shared, kept) + kept // max(1, config.num_hidden_layers)
