"""Tiny GGUF files written the way llama.cpp's convert_hf_to_gguf.py writes a Llama, for tests of
the conversion without a download: header metadata under llama.cpp's key names, a byte-level BPE
tokenizer (`tokenizer.ggml.model = gpt2`, as SmolLM2's GGUF has), and fp32 tensors under
llama.cpp's names with the query / key rows permuted as llama.cpp permutes them for its rotary layout."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

# HF parameter name (per layer) -> llama.cpp tensor name.
LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
CONTROL, NORMAL = 3, 1  # llama.cpp's token types
GGUF_EXTRA_TOKENS = ["<|endoftext|>"]


def llama_cpp_permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's rotary halves interleaved."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def write_header_only_gguf(path: Path, architecture: str) -> Path:
    """A GGUF with an architecture name and nothing else (enough to be refused by name)."""
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("header-only")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_llama_gguf(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, path: Path) -> Path:
    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    rope = getattr(config, "rope_parameters", None) or {"rope_theta": config.rope_theta}  # transformers 5 / 4
    writer.add_rope_freq_base(float(rope["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)

    vocab = tokenizer.get_vocab()
    # transformers builds a GGUF's byte-level tokenizer as GPT-2's, which adds GPT-2's `<|endoftext|>`
    # when the vocabulary lacks it (real GPT-2-family vocabularies have it): it is appended here, so
    # the model needs one embedding row more than `tokenizer` has tokens (GGUF_EXTRA_TOKENS).
    tokens = [*sorted(vocab, key=vocab.__getitem__), *GGUF_EXTRA_TOKENS]
    assert config.vocab_size == len(tokens), f"build the model with vocab_size={len(tokens)} (len(tokenizer) + {len(GGUF_EXTRA_TOKENS)})"
    special = {*tokenizer.all_special_tokens, *GGUF_EXTRA_TOKENS} | {t.content for t in tokenizer.added_tokens_decoder.values() if t.special}
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([CONTROL if t in special else NORMAL for t in tokens])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(tokenizer.bos_token_id)
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_chat_template(tokenizer.chat_template)

    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", state["model.embed_tokens.weight"])
    for layer in range(config.num_hidden_layers):
        for hf_name, cpp_name in LAYER_TENSORS.items():
            weights = state[f"model.layers.{layer}.{hf_name}"]
            if cpp_name == "attn_q.weight":
                weights = llama_cpp_permute(weights, config.num_attention_heads)
            elif cpp_name == "attn_k.weight":
                weights = llama_cpp_permute(weights, config.num_key_value_heads)
            writer.add_tensor(f"blk.{layer}.{cpp_name}", np.ascontiguousarray(weights))
    writer.add_tensor("output_norm.weight", state["model.norm.weight"])
    if not config.tie_word_embeddings:
        writer.add_tensor("output.weight", state["lm_head.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
