"""Loading and saving models in Hugging Face format: local directories, Hub ids and GGUF files
(the last two resolved to a local directory first, reinforge.models.model_source)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from reinforge.models import lora
from reinforge.models.errors import ModelLoadError
# check_model_dir and read_model_config live beside resolve_model_path (no torch import), so the CLI can
# check a model directory before it imports torch; they stay importable from here.
from reinforge.models.model_source import TOKENIZER_FILES, check_model_dir, read_model_config  # noqa: F401


def check_causal_lm_dir(path: str | Path, what: str = "--model") -> tuple[Path, dict[str, Any], PreTrainedTokenizerBase]:
    """A policy directory, checked before its weights are loaded: files present, a causal LM
    architecture, a tokenizer that loads and whose ids all have a row in the model's embedding.
    Returns the directory, its config.json and the tokenizer (cheap next to the weights)."""
    directory = check_model_dir(path, what)
    config = read_model_config(directory)
    causal = {name for names in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values() for name in ([names] if isinstance(names, str) else names)}
    architectures = config.get("architectures") or []
    if architectures:
        is_causal = any(a in causal for a in architectures)
        found = f"a {', '.join(architectures)} (config.json 'architectures')"
    else:
        is_causal = config.get("model_type") in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
        found = f"model_type {config.get('model_type')!r} (config.json)"
    if not is_causal:
        raise ModelLoadError(
            f"{what} {directory} holds {found}, not a causal language model: reinforge samples and trains "
            "next-token models (AutoModelForCausalLM, e.g. LlamaForCausalLM); save one with its LM head"
        )
    if not any((directory / name).is_file() for name in TOKENIZER_FILES):
        raise ModelLoadError(
            f"{what} {directory} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
            "save it next to the model with `tokenizer.save_pretrained(DIR)`"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ModelLoadError(f"{what} {directory}: the tokenizer does not load ({type(err).__name__}: {err})") from None
    vocab_size = config.get("vocab_size")
    if isinstance(vocab_size, int) and len(tokenizer) > vocab_size:
        raise ModelLoadError(
            f"{what} {directory}: the tokenizer has {len(tokenizer)} tokens (ids up to {len(tokenizer) - 1}) but the "
            f"model's embedding has vocab_size={vocab_size} rows, so the highest ids have no embedding; "
            "resize the embeddings (`model.resize_token_embeddings(len(tokenizer))`) and save again, or use the tokenizer the model was trained with"
        )
    return directory, config, tokenizer


def load_model_and_tokenizer(path: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    directory, _, tokenizer = check_causal_lm_dir(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype="float32")
    except (OSError, ValueError) as err:  # e.g. truncated or mismatched weight files
        raise ModelLoadError(f"{directory}: the model does not load ({type(err).__name__}: {err})") from None
    if tokenizer.pad_token_id is None:
        # Left-padded batches need a pad id; any id works since padded positions are masked.
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def save_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path) -> Path:
    """A directory `from_pretrained` opens; a LoRA model is saved merged, with its adapter in `directory/adapter`."""
    if lora.is_lora_model(model):
        return lora.save_merged_and_adapter(model, tokenizer, directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
