"""The engine's KV cache: sized from the call (its rows x (longest prompt + new tokens)), and the
estimate the memory preflight reads (reinforge.engines.kv_cache.kv_cache_bytes)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from transformers import GPT2Config, LlamaConfig, LlamaForCausalLM

from conftest import sharpen_
from reinforge.engines.base import SamplingParams
from reinforge.engines.kv_cache import kv_cache_bytes, shared_prompt_kv_cache_bytes
from reinforge.engines.llama_decoder import FusedLlamaDecoder
from reinforge.engines.torch_engine import MIN_SHARED_PROMPT, TorchEngine

SMOLLM2 = LlamaConfig(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
    num_key_value_heads=3, head_dim=64, tie_word_embeddings=True,
)


def test_the_estimate_by_hand() -> None:
    # SmolLM2-135M: 2 (k, v) x 30 layers x 3 kv heads x 64 x 4 bytes = 46,080 bytes per row and token
    assert kv_cache_bytes(SMOLLM2, rows=1, tokens=1) == 46_080
    assert kv_cache_bytes(SMOLLM2, rows=32, tokens=192, dtype="float32") == 32 * 192 * 46_080  # 283 MB
    assert kv_cache_bytes(SMOLLM2, 32, 192, torch.bfloat16) == kv_cache_bytes(SMOLLM2, 32, 192, "bfloat16") == 32 * 192 * 23_040
    # no num_key_value_heads or head_dim: every head has its own keys, of hidden / heads numbers
    gpt2 = GPT2Config(n_embd=64, n_layer=3, n_head=4)
    assert kv_cache_bytes(gpt2, 2, 10) == 2 * 3 * 2 * 10 * 64 * 4


def test_bad_inputs_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="rows >= 0 and tokens >= 0"):
        kv_cache_bytes(SMOLLM2, -1, 10)
    with pytest.raises(ValueError, match="'float64' is not one of"):
        kv_cache_bytes(SMOLLM2, 1, 10, "float64")
    with pytest.raises(ValueError, match="needs a decoder config"):
        kv_cache_bytes(object(), 1, 10)


def small_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=6,
        num_key_value_heads=2, max_position_embeddings=128,
    )
    return sharpen_(LlamaForCausalLM(config)).eval()


@torch.no_grad()
def test_the_decoder_allocates_what_the_estimate_says() -> None:
    model = small_model()
    decoder = FusedLlamaDecoder(model)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 64, (3, MIN_SHARED_PROMPT + 4), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    _, state = decoder.prefill(ids, mask, max_new_tokens=7)
    assert state.cache_bytes() == kv_cache_bytes(model.config, 3, ids.shape[1] + 7)
    # a group's prompt once per group: D x P prompt slots + D x G x new sampled ones
    group_size, prompt_len = 4, ids.shape[1]
    _, shared = decoder.prefill_shared(ids, mask, group_size, max_new_tokens=7)
    expected = kv_cache_bytes(model.config, 3, prompt_len) + kv_cache_bytes(model.config, 3 * group_size, 7)
    assert shared.cache_bytes() == expected < kv_cache_bytes(model.config, 3 * group_size, prompt_len + 7)
    peak = shared_prompt_kv_cache_bytes(model.config, 3, group_size, prompt_len, 7)
    # rows finish: the kept half gets its own copy of the prompt back, and the old layout is freed
    old = [weakref.ref(t) for t in shared.keys + shared.values + shared.shared.keys + shared.shared.values]
    shared.keep(torch.arange(0, 3 * group_size, 2))
    gc.collect()
    assert shared.shared is None and all(ref() is None for ref in old)
    assert shared.cache_bytes() == kv_cache_bytes(model.config, 3 * group_size // 2, prompt_len + 7) <= peak


def test_the_shared_prompt_peak_by_hand() -> None:
    # 8 groups of 4 with a 40-token prompt, 128 new tokens: 8 x 40 + 32 x 128 = 4416 row-slots while
    # all rows sample; 16 x 168 = 2688 once half have finished; + one of 30 layers of those
    per_slot = kv_cache_bytes(SMOLLM2, 1, 1)
    assert shared_prompt_kv_cache_bytes(SMOLLM2, 8, 4, 40, 128) == 4416 * per_slot + 2688 * per_slot // 30
    # a long prompt, one group of 8: the kept half's own prompts outweigh the shared layout
    assert shared_prompt_kv_cache_bytes(SMOLLM2, 1, 8, 1000, 10) == 4 * 1010 * per_slot + 4 * 1010 * per_slot // 30


def test_the_cache_is_sized_from_the_call_not_a_global_maximum() -> None:
    model = small_model()
    engine = TorchEngine(model, 0, max_batch_size=4)
    decoder = engine._get_decoder()
    allocated = []
    prefill = decoder.prefill

    def spy(input_ids, attention_mask, max_new_tokens):
        logits, state = prefill(input_ids, attention_mask, max_new_tokens)
        allocated.append((input_ids.shape, max_new_tokens, state.cache_bytes()))
        return logits, state

    decoder.prefill = spy
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8], [9], [10, 11], [12, 13, 14]]
    budgets = [2, 5, 3, 1, 4]
    out = engine.generate(prompts, SamplingParams(max_new_tokens=40, temperature=1.0), seed=0, budgets=budgets)
    assert [len(g.token_ids) for g in out] == budgets
    # batches of max_batch_size rows; each sized by its longest prompt and its largest budget, not 40
    assert [(tuple(shape), new) for shape, new, _ in allocated] == [((4, 5), 5), ((1, 3), 4)]
    for shape, new, size in allocated:
        assert size == kv_cache_bytes(model.config, shape[0], shape[1] + new)
