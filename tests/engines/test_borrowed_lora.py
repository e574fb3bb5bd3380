"""A borrowing engine over a LoRA model (a sharded learner's rank 0 with model.lora) reads the base
weights and the adapters where they are, unmerged (reinforge.engines.borrowed_weights), instead of
sampling a merged copy: the same samples as the merged copy, no full-size weight of its own."""

from __future__ import annotations

import copy

import pytest
import torch

from float_bounds import forward_bound
from reinforge.config import LoraConfig
from reinforge.engines.base import SamplingParams
from reinforge.engines.borrowed_decoder import BorrowedLlamaDecoder
from reinforge.engines.borrowed_weights import LoraMatrix
from reinforge.engines.torch_engine import TorchEngine
from reinforge.models.lora import apply_lora, peft_available
from test_borrowed_decoder import own_bytes

pytestmark = pytest.mark.skipif(not peft_available(), reason="needs peft")
PARAMS = SamplingParams(max_new_tokens=6, temperature=1.0)


def trained_lora(model, seed: int = 1):
    """`model` with adapters on every projection whose B is not zero (as after some training)."""
    lora = apply_lora(copy.deepcopy(model), LoraConfig(r=4, alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    noise = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=noise) * 0.3)
    return lora.eval()


def test_unmerged_sampling_is_the_merged_copys_and_holds_no_weights_of_its_own(sharp_nano_model, arithmetic_prompts, tokenizer):
    lora = trained_lora(sharp_nano_model)
    pad = tokenizer.pad_token_id
    merged, borrowing = TorchEngine(lora, pad), TorchEngine(lora, pad, borrow_weights=True)
    assert borrowing.borrow_weights and borrowing.model is lora.get_base_model()  # no inference copy
    one, two = (engine.generate(arithmetic_prompts, PARAMS, seed=3) for engine in (merged, borrowing))
    decoder = borrowing._decoder
    assert isinstance(decoder, BorrowedLlamaDecoder)
    assert all(isinstance(part, LoraMatrix) for part in decoder.layers[0].qkv_weight) and isinstance(decoder.layers[0].down_weight, LoraMatrix)
    assert own_bytes(decoder, lora) == 0
    assert own_bytes(merged._decoder, lora) >= sum(p.numel() * 4 for p in sharp_nano_model.parameters())  # the merged copy, counted
    bound = forward_bound(sharp_nano_model, 10.0)
    for a, b in zip(one, two):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < bound


def test_a_synced_borrowing_engine_samples_the_new_adapters(sharp_nano_model, arithmetic_prompts, tokenizer):
    pad = tokenizer.pad_token_id
    lora, changed = trained_lora(sharp_nano_model, seed=1), trained_lora(sharp_nano_model, seed=2)
    engine = TorchEngine(lora, pad, borrow_weights=True)
    before = engine.generate(arithmetic_prompts, PARAMS, seed=3)
    with torch.no_grad():  # as rank 0's gather writes the sharded update's adapters into the loop's model
        for target, source in zip(lora.parameters(), changed.parameters()):
            target.copy_(source)
    engine.sync_weights(1)
    after = engine.generate(arithmetic_prompts, PARAMS, seed=3)
    expected = TorchEngine(changed, pad).generate(arithmetic_prompts, PARAMS, seed=3)
    assert [g.token_ids for g in after] == [g.token_ids for g in expected] != [g.token_ids for g in before]


def test_adapters_it_cannot_read_unmerged_make_it_copy(sharp_nano_model, tokenizer):
    """Two active adapters (or DoRA, an adapted head): the engine samples the merged copy, as without borrowing."""
    lora = trained_lora(sharp_nano_model)
    import peft

    lora.add_adapter("second", peft.LoraConfig(r=2, target_modules=["q_proj"]))
    lora.base_model.set_adapter(["default", "second"])
    engine = TorchEngine(lora, tokenizer.pad_token_id, borrow_weights=True)
    assert not engine.borrow_weights and engine.model is not lora.get_base_model()
