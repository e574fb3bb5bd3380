"""An environment of the user's own, named by import path in `env.type` (params in `env.params`).

The named object is either

- a class implementing the Env protocol (envs.base: `episode()`, `prompt_ids(task)`,
  `sft_example(task)`, `decode_response(ids)`, `stop_token_ids`, `max_turns`, `tokenizer`), built
  as `cls(tokenizer, **env.params)`; it works in tokens itself, or
- an environment of another shape that one of the adapters in `ADAPTERS` recognizes (gym-style
  text envs, ...): the adapter wraps it into an Env and keeps tokens in, tokens out.

`check_user_env` runs during validation (before any model is loaded): import, shape and params.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformers import PreTrainedTokenizerBase

from reinforge.config import Config
from reinforge.envs.base import Env
from reinforge.import_paths import ImportPathError, check_call, load_object

ENV_METHODS = ("episode", "prompt_ids", "sft_example", "decode_response")
ENV_CONTRACT = (
    "an env is a class implementing reinforge.Env (episode(), prompt_ids(task), sft_example(task), "
    "decode_response(ids), stop_token_ids, max_turns), built as cls(tokenizer, **env.params)"
)


@dataclass(frozen=True)
class EnvAdapter:
    """One foreign env shape: `matches(obj)` recognizes it, `build(obj, cfg, tokenizer)` wraps it."""

    name: str
    matches: Callable[[Any], bool]
    build: Callable[[Any, Config, PreTrainedTokenizerBase], Env]
    check: Callable[[Any, Config], None]  # validation before any model (params, optional extras)
    contract: str


ADAPTERS: list[EnvAdapter] = []


def is_env_class(obj: Any) -> bool:
    return inspect.isclass(obj) and all(callable(getattr(obj, m, None)) for m in ENV_METHODS)


def _adapter_for(obj: Any) -> EnvAdapter | None:
    return next((a for a in ADAPTERS if a.matches(obj)), None)


def _shape_error(path: str, obj: Any) -> ImportPathError:
    missing = [m for m in ENV_METHODS if not callable(getattr(obj, m, None))]
    shapes = "; ".join([ENV_CONTRACT, *(f"or {a.contract}" for a in ADAPTERS)])
    return ImportPathError(f"{path} has no {', '.join(f'{m}()' for m in missing)}; {shapes}")


def check_user_env(cfg: Config) -> None:
    path = cfg.env.type
    obj = load_object(path)
    if is_env_class(obj):
        check_call(obj, (None,), cfg.env.params, f"{path}, built as cls(tokenizer, **env.params),", ENV_CONTRACT)
        return
    adapter = _adapter_for(obj)
    if adapter is None:
        raise _shape_error(path, obj)
    adapter.check(obj, cfg)


def build_user_env(cfg: Config, tokenizer: PreTrainedTokenizerBase) -> Env:
    obj = load_object(cfg.env.type)
    if is_env_class(obj):
        return obj(tokenizer, **cfg.env.params)
    adapter = _adapter_for(obj)
    if adapter is None:
        raise _shape_error(cfg.env.type, obj)
    return adapter.build(obj, cfg, tokenizer)
