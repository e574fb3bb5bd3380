"""The engine on the architectures real checkpoints have (issue 32): RoPE scaling variants,
attention scaling from the module, Qwen2's q/k/v biases, Mistral, tied embeddings through weight
syncs, and configs the fused decoder cannot run (sampled through transformers instead). Each is
checked by invariant 1: the engine's behaviour log-probs equal the learner's on the same tokens.
"""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM

from conftest import sharpen_
from engine_learner_agreement import EngineCall, assert_learner_agrees, right_padded, sample
from reinforge.config import LoraConfig
from reinforge.engines import llama_decoder
from reinforge.engines.base import SamplingParams
from reinforge.engines.llama_decoder import FusedLlamaDecoder
from reinforge.engines.torch_engine import MIN_SHARED_PROMPT, HFDecoder, TorchEngine
from reinforge.learner import packed_forward
from reinforge.learner.logprobs import token_logprobs
from reinforge.models.lora import apply_lora, peft_available

VOCAB = 96
# 6 query heads over 2 kv heads (3 per kv head, as SmolLM2), head_dim 16
SHAPE = dict(
    vocab_size=VOCAB, hidden_size=96, intermediate_size=128, num_hidden_layers=2, num_attention_heads=6,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
)
ORIGINAL = 16  # the original context of the scaled RoPE variants: prompts and samples go past it
PARAMS = SamplingParams(max_new_tokens=8, temperature=1.0)


def rope(rope_type: str, **extra) -> dict:
    return {"rope_parameters": {"rope_type": rope_type, "rope_theta": 10000.0, **extra}}


ROPES = {
    "linear": rope("linear", factor=2.0),
    "llama3": rope("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=ORIGINAL),
    "yarn": rope("yarn", factor=4.0, original_max_position_embeddings=ORIGINAL),  # and its attention scaling (mscale)
    # Below its original context longrope uses its short factors and its attention scaling.
    "longrope": rope("longrope", short_factor=[1.0 + i / 8 for i in range(8)], long_factor=[4.0] * 8, original_max_position_embeddings=64),
    # Below the original context dynamic NTK is the default RoPE; past it see the warning test.
    "dynamic": rope("dynamic", factor=2.0),
}


def build(cls, config_cls, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return sharpen_(cls(config_cls(**{**SHAPE, **overrides})), std=0.3, seed=seed).eval()


def group_prompts(seed: int = 0) -> list[list[int]]:
    """Two groups of 3 rows with prompts of 40 and 36 tokens: shared-prompt decoding, positions past ORIGINAL."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in (MIN_SHARED_PROMPT + 8, MIN_SHARED_PROMPT + 4)]
    return [p for p in prompts for _ in range(3)]


def mixed_prompts(seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, VOCAB, (n,), generator=g).tolist() for n in (20, 3, 11)]


@torch.no_grad()
def learner_logprobs(model, prompts, generations) -> torch.Tensor:
    ids, mask = right_padded([p + g.token_ids for p, g in zip(prompts, generations)])
    return token_logprobs(model, ids, mask, entropy=False)[0]


@pytest.mark.parametrize("variant", list(ROPES))
def test_rope_scaling_variants(variant) -> None:
    model = build(LlamaForCausalLM, LlamaConfig, **ROPES[variant])
    assert llama_decoder.supports(model) and model.model.rotary_emb.rope_type == variant
    calls = [sample(model, prompts, PARAMS, kernels) for kernels in ("torch", "native") for prompts in (group_prompts(), mixed_prompts())]
    assert [call.shared_prompt for call in calls] == [True, False, True, False]
    assert_learner_agrees(model, calls)
    if variant != "dynamic":  # the variant changes the log-probs: a decoder that re-derived default RoPE would fail above
        default = build(LlamaForCausalLM, LlamaConfig)
        default.load_state_dict(model.state_dict())
        prompts, generations = calls[0].prompts, calls[0].generations
        assert (learner_logprobs(model, prompts, generations) - learner_logprobs(default, prompts, generations)).abs().max() > 1e-2


def test_past_the_original_context_a_dynamic_rope_warns(caplog) -> None:
    model = build(LlamaForCausalLM, LlamaConfig, **rope("dynamic", factor=2.0), max_position_embeddings=24)
    with caplog.at_level(logging.WARNING, logger="reinforge.engines.llama_decoder"):
        sample(model, mixed_prompts(), SamplingParams(max_new_tokens=8), "torch")
    assert "past the original context (28 > 24 positions)" in caplog.text


def test_attention_scaling_is_the_modules() -> None:
    """Not head_dim**-0.5 (as Llama's is) but whatever the module holds, in every attention path:
    prefill, shared-prompt and per-row decode, torch and C."""
    model = build(LlamaForCausalLM, LlamaConfig)
    for layer in model.model.layers:
        layer.self_attn.scaling = 0.11  # transformers' forward (the learner's) reads it
    calls = [sample(model, prompts, PARAMS, kernels) for kernels in ("torch", "native") for prompts in (group_prompts(), mixed_prompts())]
    assert_learner_agrees(model, calls)


@pytest.mark.parametrize(
    "name, make",
    [
        ("qwen2: q, k, v biases, 3 query heads per kv head", lambda: build(Qwen2ForCausalLM, Qwen2Config)),
        ("qwen2 tied, yarn", lambda: build(Qwen2ForCausalLM, Qwen2Config, tie_word_embeddings=True, **ROPES["yarn"])),
        ("mistral without a sliding window", lambda: build(MistralForCausalLM, MistralConfig, sliding_window=None)),
        ("mistral, a window as long as its context", lambda: build(MistralForCausalLM, MistralConfig, sliding_window=64)),
        ("llama: biases on every projection", lambda: build(LlamaForCausalLM, LlamaConfig, attention_bias=True, mlp_bias=True)),
    ],
)
def test_other_llama_family_models(name, make) -> None:
    model = make()
    assert llama_decoder.supports(model), llama_decoder.unsupported_reason(model)
    calls = [sample(model, prompts, PARAMS, kernels) for kernels in ("torch", "native") for prompts in (group_prompts(), mixed_prompts())]
    assert_learner_agrees(model, calls)


UNSUPPORTED = {
    "sliding window": (lambda: build(MistralForCausalLM, MistralConfig, sliding_window=6), "sliding-window attention"),
    "gelu MLP": (lambda: build(LlamaForCausalLM, LlamaConfig, hidden_act="gelu"), "hidden_act 'gelu'"),
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_a_config_the_fused_decoder_cannot_run_samples_through_transformers(name, caplog) -> None:
    make, reason = UNSUPPORTED[name]
    model = make()
    assert reason in llama_decoder.unsupported_reason(model)
    assert not packed_forward.supports(model)  # the learner takes transformers' forward too
    with pytest.raises(ValueError, match=reason):
        FusedLlamaDecoder(model)
    with caplog.at_level(logging.INFO, logger="reinforge.engines.torch_engine"):
        engine = TorchEngine(model, 0)
    assert not engine.fused and isinstance(engine._get_decoder(), HFDecoder)
    assert reason in caplog.text
    prompts = group_prompts()
    call = sample(model, prompts, PARAMS)
    assert_learner_agrees(model, call, forwards=((False, "torch"),))
    # what the fused decoder would have left out matters: the same weights without it give other log-probs
    plain = build(LlamaForCausalLM, LlamaConfig)
    plain.load_state_dict(model.state_dict())
    assert (learner_logprobs(model, prompts, call.generations) - learner_logprobs(plain, prompts, call.generations)).abs().max() > 1e-2


def test_tied_embeddings_are_held_once_and_follow_weight_syncs() -> None:
    model = build(LlamaForCausalLM, LlamaConfig, tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    engine = TorchEngine(model, 0)
    decoder = engine._get_decoder()
    assert decoder.tied and decoder.embed.data_ptr() == decoder.lm_head.data_ptr()
    assert decoder.embed.data_ptr() != model.lm_head.weight.data_ptr()  # a copy: an optimizer step does not change it
    prompts = group_prompts()
    before = engine.generate(prompts, PARAMS, seed=0)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(1.5)  # in place, as an optimizer step: lm_head moves with it
    assert engine.generate(prompts, PARAMS, seed=0)[0].logprobs == before[0].logprobs  # not synced yet
    engine.sync_weights(1)
    call = sample(model, prompts, PARAMS)
    assert_learner_agrees(model, call)
    after = engine.generate(prompts, PARAMS, seed=0)
    assert [g.token_ids for g in after] == [g.token_ids for g in call.generations]
    assert max(abs(a - b) for a, b in zip(after[0].logprobs, before[0].logprobs)) > 1e-2 or after[0].token_ids != before[0].token_ids
    untied = FusedLlamaDecoder(build(LlamaForCausalLM, LlamaConfig))
    assert not untied.tied and untied.embed.data_ptr() != untied.lm_head.data_ptr()


@pytest.mark.skipif(not peft_available(), reason="needs peft (reinforge[lora])")
def test_lora_on_a_tied_gqa_model_samples_its_merged_weights() -> None:
    model = apply_lora(build(LlamaForCausalLM, LlamaConfig, tie_word_embeddings=True), LoraConfig(r=4))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:  # trained adapters (B starts at 0)
                param.normal_(0, 0.3, generator=generator)
    engine = TorchEngine(model, 0)
    engine.sync_weights(1)
    assert engine.fused and engine.model is not model
    prompts = group_prompts()
    generations = engine.generate(prompts, PARAMS, seed=0)
    model.eval()
    base = copy.deepcopy(model).unload()  # the adapters matter: without them, other log-probs
    assert (learner_logprobs(model, prompts, generations) - learner_logprobs(base, prompts, generations)).abs().max() > 1e-2
    assert_learner_agrees(model, EngineCall(prompts, generations, True), forwards=((False, "torch"),))
