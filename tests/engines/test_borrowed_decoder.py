"""The borrowing decoder (a sharded learner's rank 0: reinforge.engines.borrowed_decoder) samples
the model's own weight tensors: the fused decoder's math without a byte of weights of its own."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from conftest import sharpen_
from float_bounds import forward_bound
from reinforge.engines.base import SamplingParams
from reinforge.engines.borrowed_decoder import BorrowedLlamaDecoder
from reinforge.engines.llama_decoder import FusedLlamaDecoder
from reinforge.engines.torch_engine import TorchEngine
from tensor_storages import storages
from test_torch_engine import assert_fused_matches_transformers, small_config

CONFIGS = {
    "llama grouped kv heads": lambda: LlamaForCausalLM(small_config(LlamaConfig)),
    "llama with biases": lambda: LlamaForCausalLM(small_config(LlamaConfig, attention_bias=True, mlp_bias=True)),
    "qwen2 (q, k, v biases)": lambda: Qwen2ForCausalLM(small_config(Qwen2Config)),
    "llama untied": lambda: LlamaForCausalLM(small_config(LlamaConfig, tie_word_embeddings=False)),
}


def own_bytes(decoder, model) -> int:
    """Bytes of the weights a decoder holds in storages that are not the model's parameters."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in storages(decoder.layers + [decoder.final_norm, decoder.lm_head, decoder.embed]).items() if ptr not in params)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_borrowing_decoder_matches_transformers_and_holds_no_weights_of_its_own(name) -> None:
    torch.manual_seed(0)
    model = sharpen_(CONFIGS[name]()).eval()
    prompts = [[3, 4, 5, 6, 7, 8], [9, 10], [11, 12, 13, 14]]
    assert_fused_matches_transformers(model, prompts, pad=0, forced=[[20, 21], [22, 23], [24, 25]], decoder_class=BorrowedLlamaDecoder)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert own_bytes(BorrowedLlamaDecoder(model), model) == 0
    assert own_bytes(FusedLlamaDecoder(model), model) >= weights  # the copying decoder: a full copy (the check sees it)


def test_engine_borrowing_samples_what_the_copying_engine_samples_and_follows_the_model(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    """The same sampled tokens (same seed) and log-probs within float32 bounds; after the model changes and a
    sync, the borrowing engine samples the new weights (it holds no stale copy)."""
    model = sharp_nano_model
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    pad = tokenizer.pad_token_id
    copying, borrowing = TorchEngine(model, pad), TorchEngine(model, pad, borrow_weights=True)
    assert borrowing.borrow_weights
    one, two = (engine.generate(arithmetic_prompts, params, seed=3) for engine in (copying, borrowing))
    assert isinstance(borrowing._decoder, BorrowedLlamaDecoder) and own_bytes(borrowing._decoder, model) == 0
    bound = forward_bound(model, 10.0)
    for a, b in zip(one, two):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < bound
    changed, other = (type(model)(model.config).eval() for _ in range(2))
    changed.load_state_dict(model.state_dict())
    noise = torch.Generator().manual_seed(1)
    other.load_state_dict({k: v + torch.randn(v.shape, generator=noise) for k, v in model.state_dict().items()})
    borrowing_changed = TorchEngine(changed, pad, borrow_weights=True)
    borrowing_changed.generate(arithmetic_prompts, params, seed=3)  # built over the old weights
    with torch.no_grad():
        for target, source in zip(changed.parameters(), other.parameters()):
            target.copy_(source)  # as rank 0's gather writes the sharded update into the loop's model
    borrowing_changed.sync_weights(1)
    after = borrowing_changed.generate(arithmetic_prompts, params, seed=3)
    expected = TorchEngine(other, pad).generate(arithmetic_prompts, params, seed=3)
    assert [g.token_ids for g in after] == [g.token_ids for g in expected] != [g.token_ids for g in two]
    assert {g.policy_version for g in after} == {1}


def test_an_engine_in_another_dtype_copies(nano_model, tokenizer) -> None:
    """bf16 sampling of a float32 model needs a cast, i.e. a copy: the engine copies (and says so)."""
    engine = TorchEngine(nano_model, tokenizer.pad_token_id, dtype="bfloat16", borrow_weights=True)
    assert not engine.borrow_weights
    with pytest.raises(ValueError, match="model's dtype"):
        BorrowedLlamaDecoder(nano_model, torch.bfloat16)
