"""Defaults for a pretrained model given with `--model` (or `reinforge.train(model=...)`).

The shipped recipes are tuned for the tiny self-built Llama. Four of their settings wreck or
starve a pretrained model, so with `--model` they change unless the user chose them:

- `algo.lr` 1e-5: the tiny model's 2e-4 collapsed SmolLM2-135M-Instruct (greedy accuracy 16.7% ->
  6.7%, entropy 2.05 -> 0.07, "11" to everything) where 1e-5 took it 16.7% -> 70.0% (issue 33).
- `rollout.max_new_tokens` 128: the toy's 8 tokens cut an instruct model mid-sentence, so nothing
  is scored right. Measured: SmolLM2-135M-Instruct's sampled answers (temperature 1.0) to 12 chat
  prompts "a+b=" ran 13, 16, 43, 45, 60, 69, 78, 134, 140, 144, 256+, 256+ tokens: 128 keeps most
  whole, and a cut answer scores nothing, which RL turns into shorter answers; a longer cap makes
  every rollout slower (its time grows with the cap). Capped at half the model's context when
  its config.json says it.
- `task.answer_extractor` auto: an instruct model writes "7 + 5 = 12", not the bare "12" the tiny
  model is taught, so the whole-response match scored SmolLM2 0% where the last number it writes
  was right 12-62% of the time (reinforge.tasks.answer_extraction; `<answer>` tags, \boxed{} and
  `####` still win where the model writes them).
- `rollout.prompt_format` auto: chat when the tokenizer has a template, as an instruct model
  expects (the default recipe's raw prompts are for a completion model).

The user chose a key when an override sets it, or a recipe file of their own does; the shipped
recipes' values are the tiny model's and give way. A model saved by a reinforge run (RUN/final,
RUN/warm_start, a checkpoint: a run config.yaml at or up to three levels above it) was trained
under that config: there the three keys take the run's own values instead (a warm start of the
default recipe keeps its raw prompts, a fine-tuned SmolLM2 its small lr). What changed is said in
one line, with how to override it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from reinforge.config.loading import load_config, load_yaml_file, recipe_path
from reinforge.config.schema import ConfigError

PRETRAINED_DEFAULTS: dict[str, Any] = {
    "algo.lr": 1e-5,
    "rollout.max_new_tokens": 128,
    "rollout.prompt_format": "auto",
    "task.answer_extractor": "auto",
}


def _is_set(tree: Any, dotted: str) -> bool:
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return False
        tree = tree[part]
    return True


def _value(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _context(model: str) -> int | None:
    """max_position_embeddings of a local model directory's config.json, when it says."""
    try:
        value = json.loads((Path(model) / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def _run_values(model: str) -> tuple[dict[str, Any], Path] | None:
    """The keys' values in the config of the run that saved `model`, when it is inside one."""
    from reinforge.config.eval_config import find_run_config  # YAML only, no model, no torch

    run_config = find_run_config(model) if Path(model).is_dir() else None
    if run_config is None:
        return None
    tree = load_yaml_file(run_config) or {}
    values = {}
    for key in PRETRAINED_DEFAULTS:
        node: Any = tree
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            values[key] = node
    return values, run_config


def pretrained_defaults(recipe: str, overrides: Sequence[str], model: str) -> tuple[list[str], str | None]:
    """(overrides that apply the defaults the user did not choose, the line that says so or None)."""
    chosen = {item.split("=", 1)[0].strip() for item in overrides if "=" in item}
    path = recipe_path(recipe)
    shipped = path.parent == Path(str(resources.files("reinforge.recipes")))
    own = {} if shipped else (load_yaml_file(path) or {})
    run = _run_values(model)
    if run is not None:
        defaults, source = run[0], f"the values of the run that saved it ({run[1]})"
    else:
        defaults, source = dict(PRETRAINED_DEFAULTS), "pretrained-model defaults"
        context = _context(model)
        if context is not None:
            defaults["rollout.max_new_tokens"] = min(defaults["rollout.max_new_tokens"], max(1, context // 2))
    changes = {key: value for key, value in defaults.items() if key not in chosen and not _is_set(own, key)}
    try:
        recipe_cfg = load_config(recipe, list(overrides))  # what the recipe would give: said in the line
    except ConfigError:
        recipe_cfg = None  # the run's own load reports it
    if recipe_cfg is not None:
        changes = {key: value for key, value in changes.items() if _value(recipe_cfg, key) != value}
    if not changes:
        return [], None
    def said(key: str, value: Any) -> str:
        shown = f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
        return shown if recipe_cfg is None else f"{shown} (recipe: {_value(recipe_cfg, key)})"

    line = (f"--model: using {source}: {', '.join(said(k, v) for k, v in changes.items())}; recipe "
            f"{recipe}'s values are tuned for the tiny model; override with e.g. {next(iter(changes))}=...")
    return [f"{key}={value}" for key, value in changes.items()], line
