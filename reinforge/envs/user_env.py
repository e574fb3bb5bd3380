"""An environment of the user's own, named by import path in `env.type` (params in `env.params`).

The named object is either

- a class implementing the Env protocol (envs.base: `episode()`, `prompt_ids(task)`,
  `sft_example(task)`, `decode_response(ids)`, `stop_token_ids`, `max_turns`, `tokenizer`), built
  as `cls(tokenizer, **env.params)`; it works in tokens itself, or
- an environment of another shape that one of the adapters in `ADAPTERS` recognizes (gym-style
  text envs, SkyRL text envs, TRL environment classes, verifiers environments; envs.adapters and
  docs/adapters.md): the adapter wraps it into an Env and keeps tokens in, tokens out.

`check_user_env` runs during validation (before any model is loaded): import, shape and params.
"""

from __future__ import annotations

import inspect
from typing import Any

from transformers import PreTrainedTokenizerBase

from reinforge.config import Config
from reinforge.envs.adapters import ADAPTERS as BUILTIN_ADAPTERS
from reinforge.envs.adapters.base import AdapterError, EnvAdapter
from reinforge.envs.base import Env
from reinforge.import_paths import ImportPathError, check_call, describe, load_object

ENV_METHODS = ("episode", "prompt_ids", "sft_example", "decode_response")
ENV_CONTRACT = (
    "an env is a class implementing reinforge.Env (episode(), prompt_ids(task), sft_example(task), "
    "decode_response(ids), stop_token_ids, max_turns), built as cls(tokenizer, **env.params)"
)


# Tried in order, the first that recognizes the object wins (envs.adapters).
ADAPTERS: list[EnvAdapter] = list(BUILTIN_ADAPTERS)


def is_env_class(obj: Any) -> bool:
    return inspect.isclass(obj) and all(callable(getattr(obj, m, None)) for m in ENV_METHODS)


def _adapter_for(obj: Any) -> EnvAdapter | None:
    return next((a for a in ADAPTERS if a.matches(obj)), None)


def _shape_error(path: str, obj: Any) -> ImportPathError:
    """What `obj` lacks for each shape it could have had, and each shape's contract."""
    missing = [f"{m}()" for m in ENV_METHODS if not callable(getattr(obj, m, None))]
    lines = [f"as a reinforge Env it has no {', '.join(missing)} ({ENV_CONTRACT})"]
    for adapter in ADAPTERS:
        lacks = adapter.missing(obj)
        lines.append(f"as a {adapter.name} it " + (f"has no {', '.join(lacks)}" if lacks else "does not fit") + f" ({adapter.contract})")
    return ImportPathError(f"{path} ({describe(obj)}) fits no env shape: " + "; ".join(lines))


def check_user_env(cfg: Config) -> None:
    path = cfg.env.type
    obj = load_object(path)
    if is_env_class(obj):
        check_call(obj, (None,), cfg.env.params, f"{path}, built as cls(tokenizer, **env.params),", ENV_CONTRACT)
        return
    adapter = _adapter_for(obj)
    if adapter is None:
        raise _shape_error(path, obj)
    if cfg.rollout.prompt_format == "raw":
        raise ImportPathError(
            f"{path} is a {adapter.name}: its episodes are chat turns (the env's replies between the policy's), which "
            "rollout.prompt_format=raw cannot hold; set rollout.prompt_format=auto or chat"
        )
    try:
        adapter.check(obj, cfg)
    except AdapterError as err:
        raise ImportPathError(f"{path} ({adapter.name}): {err}") from None


def build_user_env(cfg: Config, tokenizer: PreTrainedTokenizerBase) -> Env:
    obj = load_object(cfg.env.type)
    if is_env_class(obj):
        return obj(tokenizer, **cfg.env.params)
    adapter = _adapter_for(obj)
    if adapter is None:
        raise _shape_error(cfg.env.type, obj)
    return adapter.build(obj, cfg, tokenizer)
