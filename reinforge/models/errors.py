"""The error of a model setting that cannot serve (kept apart so that resolving a model path
imports neither torch nor transformers)."""

from __future__ import annotations

from reinforge.config import ConfigError


class ModelLoadError(ConfigError):
    """A model directory, Hub id or GGUF file that cannot serve: a config error of the key that names it."""
