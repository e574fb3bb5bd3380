"""What an adapter is: how reinforge recognizes, checks and wraps an env written for another
ecosystem (`env.type` naming such an object by import path; envs.user_env picks the adapter)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from transformers import PreTrainedTokenizerBase

if TYPE_CHECKING:
    from reinforge.config import Config
    from reinforge.envs.base import Env


class AdapterError(ValueError):
    """A foreign env that does not keep its contract (a wrong return shape, a missing method)."""


@dataclass(frozen=True)
class EnvAdapter:
    """One foreign env shape.

    `matches(obj)` recognizes it (adapters are tried in order, the first match wins);
    `missing(obj)` lists what an object lacks to be of this shape (for the error when nothing
    matches); `check(obj, cfg)` validates before any model is loaded (params, optional extras);
    `build(obj, cfg, tokenizer)` wraps it into a reinforge Env; `contract` says the shape in words.
    """

    name: str
    matches: Callable[[Any], bool]
    build: Callable[[Any, "Config", PreTrainedTokenizerBase], "Env"]
    check: Callable[[Any, "Config"], None]
    contract: str
    missing: Callable[[Any], list[str]] = lambda obj: []


def public_methods(cls: type) -> list[str]:
    """Names of the callable attributes of `cls` not starting with '_'."""
    return [name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name, None))]


def lacking(obj: Any, names: tuple[str, ...]) -> list[str]:
    """Of `names`, the methods `obj` does not have, written as `name()`."""
    return [f"{n}()" for n in names if not callable(getattr(obj, n, None))]


def close_foreign(foreign: object) -> None:
    """Call the foreign env's `close()` when it has one (gymnasium and SkyRL envs may)."""
    close = getattr(foreign, "close", None)
    if callable(close):
        close()
