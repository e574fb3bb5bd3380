"""Tokenizer training, tiny Llama presets, and the save -> plain `transformers` load round trip."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from reinforge.models.loading import ModelLoadError, check_causal_lm_dir, check_model_dir, load_model_and_tokenizer, save_model
from reinforge.models.tiny_llama import PRESETS, build_tiny_llama
from reinforge.models.tokenizer import BOS, EOS, PAD

TEXTS = ["12+345=357", "0+0=0", "hello world", "  spaces and\nnewlines ", "héllo ✓ 42 — ünïcode"]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_round_trips_text_and_prepends_bos(tokenizer, text) -> None:
    ids = tokenizer(text).input_ids
    assert ids[0] == tokenizer.bos_token_id
    assert tokenizer.bos_token_id not in ids[1:]
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer(text, add_special_tokens=False).input_ids == ids[1:]


def test_special_tokens_are_distinct_and_named(tokenizer) -> None:
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token) == (PAD, BOS, EOS)
    ids = {tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id}
    assert len(ids) == 3 and None not in ids
    assert tokenizer.padding_side == "left"


def test_digits_are_split_one_per_token(tokenizer) -> None:
    ids = tokenizer("9081726354+1=9081726355", add_special_tokens=False).input_ids
    tokens = [tokenizer.decode([i]) for i in ids]
    assert tokens == list("9081726354") + ["+", "1", "="] + list("9081726355")
    # and each digit always maps to the same id, wherever it appears
    digit_ids = {d: tokenizer(d, add_special_tokens=False).input_ids for d in "0123456789"}
    assert all(len(v) == 1 for v in digit_ids.values())
    assert len({v[0] for v in digit_ids.values()}) == 10
    assert ids[:3] == [digit_ids["9"][0], digit_ids["0"][0], digit_ids["8"][0]]


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset_builds_and_runs(tokenizer, preset) -> None:
    hidden, layers, heads, kv_heads, mlp = PRESETS[preset]
    model = build_tiny_llama(tokenizer, preset, max_positions=64)
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.intermediate_size) == (
        hidden, layers, heads, kv_heads, mlp,
    )
    assert c.vocab_size == len(tokenizer)
    assert c.max_position_embeddings == 64
    assert (c.bos_token_id, c.eos_token_id, c.pad_token_id) == (
        tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id,
    )
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied
    with torch.no_grad():
        logits = model(torch.tensor([tokenizer("1+2=").input_ids])).logits
    assert logits.shape == (1, 5, len(tokenizer))
    assert torch.isfinite(logits).all()


def test_build_is_seeded_and_leaves_the_global_rng_alone(tokenizer) -> None:
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    a = build_tiny_llama(tokenizer, "nano", seed=5)
    assert torch.equal(torch.rand(1), expected_next)
    b = build_tiny_llama(tokenizer, "nano", seed=5)
    c = build_tiny_llama(tokenizer, "nano", seed=6)
    assert torch.equal(a.model.embed_tokens.weight, b.model.embed_tokens.weight)
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_unknown_preset_is_rejected(tokenizer) -> None:
    with pytest.raises(ValueError, match="nano"):
        build_tiny_llama(tokenizer, "huge")


def test_saved_model_loads_with_plain_transformers(tmp_path, tokenizer, sharp_nano_model) -> None:
    directory = save_model(sharp_nano_model, tokenizer, tmp_path / "model")
    assert (directory / "config.json").is_file()
    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True).eval()
    loaded_tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)

    for text in TEXTS:
        assert loaded_tokenizer(text).input_ids == tokenizer(text).input_ids
    assert (loaded_tokenizer.pad_token_id, loaded_tokenizer.bos_token_id, loaded_tokenizer.eos_token_id) == (
        tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id,
    )
    ids = torch.tensor([tokenizer("123+456=579").input_ids])
    with torch.no_grad():
        original = sharp_nano_model(ids).logits
        reloaded = model(ids).logits
    assert original.abs().max() > 1.0
    assert torch.equal(original, reloaded)  # same weights, same code path and threads: bit for bit

    # and through reinforge's own loader, which also sets left padding
    model2, tokenizer2 = load_model_and_tokenizer(str(directory))
    assert tokenizer2.padding_side == "left" and tokenizer2.pad_token_id == tokenizer.pad_token_id
    with torch.no_grad():
        assert torch.equal(model2.eval()(ids).logits, original)


def test_missing_model_path_says_what_was_expected(tmp_path, monkeypatch) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ModelLoadError, match="expected a local Hugging Face model directory .*a .gguf file, a Hub id") as info:
        check_model_dir(str(missing))
    assert str(missing) in str(info.value)
    assert isinstance(info.value, ValueError)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a Hub id is looked up in the cache only: no network in tests
    with pytest.raises(ModelLoadError, match="not in the Hugging Face cache .*HF_HUB_OFFLINE is set"):
        load_model_and_tokenizer("meta-llama/Llama-3.2-1B")


def test_directory_without_config_is_rejected(tmp_path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="config.json"):
        check_model_dir(str(tmp_path))


@pytest.fixture
def saved(tmp_path, tokenizer, nano_model):
    """A good policy directory, for each test to break in one way."""
    return save_model(nano_model, tokenizer, tmp_path / "model")


def test_a_saved_policy_passes_every_check(saved, tokenizer) -> None:
    directory, config, loaded = check_causal_lm_dir(str(saved))
    assert directory == saved and config["architectures"] == ["LlamaForCausalLM"]
    assert len(loaded) == len(tokenizer) <= config["vocab_size"]


def test_missing_weights_are_named_before_loading(saved) -> None:
    (saved / "model.safetensors").unlink()
    with pytest.raises(ModelLoadError, match="has no weights") as err:
        check_model_dir(str(saved))
    assert str(saved) in str(err.value) and "save_pretrained" in str(err.value)
    with pytest.raises(ModelLoadError, match="has no weights"):
        load_model_and_tokenizer(str(saved))  # not transformers' OSError


def test_broken_config_json_names_file_line_and_column(saved) -> None:
    (saved / "config.json").write_text('{\n  "model_type": "llama",\n  "vocab_size": 384,,\n}\n')
    with pytest.raises(ModelLoadError) as err:
        check_model_dir(str(saved))
    assert f"{saved / 'config.json'}:3:21: not valid JSON" in str(err.value)
    (saved / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelLoadError, match="expected a JSON object"):
        load_model_and_tokenizer(str(saved))


def test_missing_tokenizer_is_named(saved) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (saved / name).unlink(missing_ok=True)
    with pytest.raises(ModelLoadError, match="has no tokenizer") as err:
        check_causal_lm_dir(str(saved))
    assert "tokenizer.save_pretrained" in str(err.value)


def test_a_non_causal_model_is_refused(saved, tmp_path) -> None:
    from transformers import BertConfig, BertModel

    bert = tmp_path / "bert"
    BertModel(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)).save_pretrained(bert)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (bert / name).write_bytes((saved / name).read_bytes())
    with pytest.raises(ModelLoadError, match="BertModel") as err:
        check_causal_lm_dir(str(bert))
    assert "not a causal language model" in str(err.value) and "ForCausalLM" in str(err.value)
    # no `architectures`: judged by model_type
    config = json.loads((saved / "config.json").read_text())
    del config["architectures"]
    (saved / "config.json").write_text(json.dumps(config))
    check_causal_lm_dir(str(saved))
    (saved / "config.json").write_text(json.dumps({**config, "model_type": "vit"}))
    with pytest.raises(ModelLoadError, match="model_type 'vit'"):
        check_causal_lm_dir(str(saved))


def test_tokenizer_ids_beyond_the_embedding_are_refused(saved, tokenizer) -> None:
    config = json.loads((saved / "config.json").read_text())
    (saved / "config.json").write_text(json.dumps({**config, "vocab_size": len(tokenizer) - 5}))
    with pytest.raises(ModelLoadError) as err:
        load_model_and_tokenizer(str(saved))
    message = str(err.value)
    assert f"{len(tokenizer)} tokens" in message and f"vocab_size={len(tokenizer) - 5}" in message
    assert "resize_token_embeddings" in message
