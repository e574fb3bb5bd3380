"""A .gguf file (llama.cpp's format) as a plain Hugging Face directory, converted once into the cache.

transformers reads a GGUF checkpoint through the `gguf` package and dequantizes its weights to
fp32, but `save_pretrained` refuses a model that still carries the GGUF quantization config. So
the recipe is: read the config (which names an architecture transformers may not support: that is
refused first, before any weight is read), load tokenizer and model from the GGUF, copy the weights
into a plain model of the same config class minus `quantization_config`, tie the embeddings again,
and save both. The weights stay fp32, so the directory computes exactly what the GGUF model does.

The directory is `$REINFORGE_CACHE_DIR/gguf/<stem>-<key>`, the key a hash of the file's name, size
and modification time (cheap to recompute on every resolution, unlike a hash of its contents); a
changed file gets a new directory. It is written under a temporary name and renamed into place,
so two processes that convert the same file at once both end with one complete copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from reinforge.kernels.build import cache_dir
from reinforge.models.errors import ModelLoadError
from reinforge.models.progress import Log, progress

SOURCE_RECORD = "reinforge_source.json"  # where the directory came from, for a reader who wonders


def gguf_cache_root() -> Path:
    return cache_dir() / "gguf"


def conversion_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.name}\0{stat.st_size}\0{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return gguf_cache_root() / f"{gguf.stem}-{key}"


def is_complete(directory: Path) -> bool:
    """A conversion is complete once renamed into place; config.json guards against a hand-emptied one."""
    return (directory / "config.json").is_file() and (directory / SOURCE_RECORD).is_file()


def converted_gguf_dir(gguf: Path, what: str = "--model", log: Log = progress) -> Path:
    """The Hugging Face directory of `gguf`, converting it on the first call."""
    target = conversion_dir(gguf)
    if is_complete(target):
        return target
    return convert_once(gguf, target, what, log)


def convert_once(gguf: Path, target: Path, what: str = "--model", log: Log = progress) -> Path:
    """Convert `gguf` into `target` through a temporary sibling directory and an atomic rename;
    a `target` another process completed meanwhile is kept and returned."""
    architecture = check_gguf(gguf, what)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and not is_complete(target):
        shutil.rmtree(target, ignore_errors=True)  # never a rename's result: a directory someone emptied by hand
    log(f"converting {gguf} (GGUF, architecture {architecture}) to a Hugging Face directory, once: {target}")
    start = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        os.chmod(scratch, 0o755)  # mkdtemp's 0700 would hide a shared cache's model from its other users
        convert_gguf(gguf, scratch, architecture, what)
        record = {"gguf": str(gguf.resolve()), "size": gguf.stat().st_size, "mtime_ns": gguf.stat().st_mtime_ns,
                  "architecture": architecture}
        (scratch / SOURCE_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        try:
            os.rename(scratch, target)
        except OSError:
            if not is_complete(target):  # not a concurrent conversion's result: a real failure
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log(f"converted in {time.perf_counter() - start:.0f} s: {target}")
    return target


def gguf_architecture(gguf: Path, what: str = "--model") -> str:
    """`general.architecture` of a GGUF file's header, or a ModelLoadError for a file that is not GGUF."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ModelLoadError(f"{what} {gguf}: reading .gguf files needs the `gguf` package: pip install gguf") from None
    try:
        field = GGUFReader(gguf, "r").fields.get("general.architecture")
    except (ValueError, OSError, KeyError, IndexError) as err:
        raise ModelLoadError(f"{what} {gguf}: not a readable GGUF file ({type(err).__name__}: {err})") from None
    if field is None:
        raise ModelLoadError(f"{what} {gguf}: the GGUF header has no general.architecture, so no model class can read it")
    return bytes(field.parts[field.data[0]]).decode("utf-8")


def check_gguf(gguf: Path, what: str = "--model") -> str:
    """The GGUF's architecture, once transformers has read its config (header only, no weights) and
    found a causal LM; else a ModelLoadError naming the architecture."""
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    architecture = gguf_architecture(gguf, what)
    try:
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except ValueError as err:
        if "not supported" in str(err):
            raise ModelLoadError(
                f"{what} {gguf}: transformers {transformers.__version__} cannot dequantize GGUF architecture "
                f"{architecture!r} ({err}); it reads {', '.join(readable_architectures())}. Pass the model's Hugging "
                "Face directory or Hub id instead, or a GGUF of one of those architectures"
            ) from None
        raise ModelLoadError(f"{what} {gguf}: transformers cannot read this GGUF's config (architecture {architecture!r}): {err}") from None
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ModelLoadError(
            f"{what} {gguf}: GGUF architecture {architecture!r} is a {config.model_type} model, not a causal language model "
            "that reinforge can sample and train"
        )
    return architecture


def readable_architectures() -> list[str]:
    """The GGUF architectures this transformers dequantizes (its own list, where it exposes one)."""
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:
        return ["llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "..."]
    return [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")]


def convert_gguf(gguf: Path, out: Path, architecture: str, what: str = "--model") -> None:
    """Write the plain Hugging Face model and tokenizer of `gguf` (checked by `check_gguf`) into directory `out`."""
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a bar per shard: our two log lines say enough
    try:
        _convert(gguf, out, architecture, what)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _convert(gguf: Path, out: Path, architecture: str, what: str) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where, name = gguf.parent, gguf.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
        loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    except (ValueError, KeyError, TypeError, NotImplementedError, RuntimeError, OSError) as err:
        raise ModelLoadError(
            f"{what} {gguf}: transformers {transformers.__version__} could not dequantize this GGUF "
            f"(architecture {architecture!r}; {type(err).__name__}: {err})"
        ) from None
    # `save_pretrained` refuses a model carrying the GGUF quantization config: a plain twin takes its weights.
    settings = {k: v for k, v in loaded.config.to_dict().items() if k != "quantization_config"}
    plain = AutoModelForCausalLM.from_config(type(loaded.config).from_dict(settings), dtype=torch.float32)
    try:
        plain.load_state_dict(loaded.state_dict(), strict=True)
    except RuntimeError as err:  # names that differ between the GGUF model and its plain class
        raise ModelLoadError(f"{what} {gguf}: the dequantized weights do not fit a plain {type(plain).__name__}: {err}") from None
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
