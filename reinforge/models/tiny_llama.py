"""Tiny Llama-style causal LMs built locally from `transformers.LlamaConfig` (no downloads)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

# name -> (hidden, layers, heads, kv_heads, mlp); parameter counts are for a 384-token vocabulary.
PRESETS: dict[str, tuple[int, int, int, int, int]] = {
    "nano": (64, 2, 4, 4, 256),  # ~0.1M: unit tests
    "micro": (128, 4, 4, 4, 512),  # ~0.8M: the default recipe
    "tiny": (256, 6, 8, 4, 1024),  # ~4.5M
    "small": (512, 8, 8, 4, 2048),  # ~25M
}


def tiny_llama_skeleton(preset: str) -> LlamaForCausalLM:
    """The module structure of a preset (layer names, on the meta device: no memory, no init), for
    checks before compute. The vocabulary size does not change any name."""
    hidden, layers, heads, kv_heads, mlp = PRESETS[preset]
    config = LlamaConfig(
        vocab_size=8, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, tie_word_embeddings=True,
    )
    with torch.device("meta"):
        return LlamaForCausalLM(config)


def build_tiny_llama(
    tokenizer: PreTrainedTokenizerBase, preset: str = "micro", max_positions: int = 128, seed: int = 0
) -> LlamaForCausalLM:
    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    hidden, layers, heads, kv_heads, mlp = PRESETS[preset]
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=mlp,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)
