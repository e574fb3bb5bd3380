"""Loading and saving models in Hugging Face format, from local directories only."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase


class ModelLoadError(ValueError):
    pass


def check_model_dir(path: str, what: str = "--model") -> Path:
    """Fail before compute unless `path` is a local HF model directory (`what` names the setting)."""
    directory = Path(path)
    if not directory.is_dir():
        raise ModelLoadError(
            f"{what} {path!r} is not a local directory. reinforge loads models from disk only "
            "(no hub downloads on this machine): pass a directory written by `save_pretrained` "
            "(with config.json, weights and tokenizer files), or omit --model to build the tiny model."
        )
    if not (directory / "config.json").is_file():
        raise ModelLoadError(f"{directory} has no config.json; it is not a Hugging Face model directory")
    return directory


def load_model_and_tokenizer(path: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    directory = check_model_dir(path)
    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True, dtype="float32")
    if tokenizer.pad_token_id is None:
        # Left-padded batches need a pad id; any id works since padded positions are masked.
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def save_model(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
