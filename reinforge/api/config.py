"""`reinforge.load_config`: the recipe loader, with overrides given as Python values.

Overrides come as `KEY=VALUE` strings (as on the command line), as a dict of dotted or nested keys
(`{"algo.lr": 1e-5}`, `{"algo": {"lr": 1e-5}}`), or as keyword sections (`trainer={"steps": 5}`).
They all become the command line's `KEY=VALUE` items (each value written as JSON, which YAML
reads back unchanged), so precedence and error messages are exactly the CLI's. A function, class
or instance anywhere in a value is named as `config_name` names it (api.objects).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from reinforge.api.objects import config_name
from reinforge.config import Config, ConfigError, apply_method_preset, apply_override, build_config, deep_merge
from reinforge.config import load_config as load_recipe
from reinforge.import_paths import absolute_file_paths

Overrides = Union[Sequence[str], Mapping[str, Any]]


def load_config(recipe: str | os.PathLike | None = "default", overrides: Overrides = (), **sections: Any) -> Config:
    """The validated Config of `recipe` (a shipped recipe's name or a YAML path; None: the schema's
    defaults) with `overrides` and keyword `sections` on top, e.g.

        reinforge.load_config("default", {"algo.lr": 1e-5}, trainer={"steps": 5})

    Raises ConfigError naming the key, as the command line does."""
    return load_recipe(None if recipe is None else str(recipe), override_items(overrides, sections))


def config_with(config: Config, overrides: Overrides = (), **sections: Any) -> Config:
    """A copy of `config` with overrides on top (an `algo.method` among them resets the algo keys
    to that method's preset first, as on the command line)."""
    tree = config.model_dump(mode="json")
    top: dict[str, Any] = {}
    for item in override_items(overrides, sections):
        apply_override(top, item)
    top = absolute_file_paths(top, Path.cwd())  # './x.py:f' against the current directory, as on the command line
    method = (top.get("algo") or {}).get("method")
    if method is not None:
        apply_method_preset(tree, method, keep_existing=False)
    deep_merge(tree, top)
    return build_config(tree)


def override_items(overrides: Overrides, sections: Mapping[str, Any] | None = None) -> list[str]:
    """`KEY=VALUE` strings from strings, a dict of dotted / nested keys and keyword sections."""
    if isinstance(overrides, str):
        raise ConfigError(f"overrides must be a list of 'key=value' strings or a dict, got the string {overrides!r}")
    if isinstance(overrides, Mapping):
        items = [f"{key}={to_json(value, key)}" for key, value in overrides.items()]
    else:
        items = []
        for item in overrides:
            if not isinstance(item, str):
                raise ConfigError(f"override {item!r} is not a 'key=value' string; pass a dict for Python values")
            items.append(item)
    for section, value in (sections or {}).items():
        if not isinstance(value, Mapping):
            raise ConfigError(f"{section}=... must be a dict of that section's keys, e.g. {section}={{...}}; got {value!r}")
        items += [f"{section}.{key}={to_json(v, f'{section}.{key}')}" for key, v in value.items()]
    return items


def to_json(value: Any, key: str) -> str:
    return json.dumps(plain(value, key), allow_nan=False)


def plain(value: Any, key: str) -> Any:
    """`value` as JSON data; functions, classes and instances of other types by their config name."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{key}: {value} is not a valid config value")
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v, f"{key}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, f"{key}[{i}]") for i, v in enumerate(value)]
    if callable(value):
        return config_name(value)
    raise ConfigError(
        f"{key}: a {type(value).__name__} is not a config value (numbers, strings, lists, dicts, or a "
        "function / class named by import path)"
    )
