"""Invariant 1 on the real model (SmolLM2-135M-Instruct: 30 layers, 9 query heads over 3 kv heads,
tied embeddings): on chat-templated prompts, the engine's behaviour log-probs equal the learner's
recomputed log-probs, for shared prompts on and off, decode through torch and the C kernels,
and every learner forward (padded, packed with torch's or the C kernels)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine_learner_agreement import assert_learner_agrees, sample
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import MIN_SHARED_PROMPT

QUESTIONS = ["What is 7 + 5?", "Name a colour of the sky.", "Write one word that rhymes with cat."]
GROUP = 2


@pytest.fixture(scope="module")
def real_model(real_model_dir):
    model = AutoModelForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(real_model_dir)


@pytest.mark.real_model
@pytest.mark.parametrize("shared", [True, False], ids=["shared-prompt", "per-row-prompt"])
def test_real_model_behaviour_logprobs_equal_the_learners(real_model, shared) -> None:
    model, tokenizer = real_model
    assert (model.config.num_attention_heads, model.config.num_key_value_heads) == (9, 3)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=False)
        for q in QUESTIONS
    ]
    assert min(map(len, prompts)) >= MIN_SHARED_PROMPT  # the system prompt makes every prompt long enough to share
    rows = [list(p) for p in prompts for _ in range(GROUP)]
    params = SamplingParams(max_new_tokens=16, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))
    calls = [
        sample(model, rows, params, kernels, shared, seed=1, pad=tokenizer.pad_token_id)
        for kernels in ("torch", "native")
    ]
    assert [call.shared_prompt for call in calls] == [shared, shared]
    assert_learner_agrees(model, calls)
