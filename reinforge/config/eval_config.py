"""Which config `reinforge eval --model DIR` evaluates under: the run's own, when DIR is inside a run.

A model saved by a run (RUN/final, RUN/warm_start, RUN/checkpoints/step_N/model) was trained on
that run's task, prompt format and seed, and its held-out split is drawn from those: evaluating it
under the default recipe would score it on another task, or on tasks it trained on. So unless
`--recipe` names one, the config is RUN/config.yaml, found next to or up to three levels above the
model directory; command-line overrides apply on top either way. Loads no model (no torch).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from reinforge.config import Config, ConfigError, load_config

RUN_CONFIG = "config.yaml"
LEVELS_UP = 3  # RUN/checkpoints/step_N/model is three levels below RUN
RUN_SECTIONS = {"model", "task", "trainer"}  # every config.yaml a run writes has these sections


@dataclass(frozen=True)
class EvalConfig:
    config: Config
    source: str  # one line for the user: which config, and why


def is_run_config(path: Path) -> bool:
    """A config.yaml as a reinforge run writes it (all of the schema's sections), not some other tool's."""
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(tree, dict) and RUN_SECTIONS <= set(tree) and set(tree) <= set(Config.model_fields)


def find_run_config(model_dir: str | Path) -> Path | None:
    """The nearest run config.yaml in `model_dir` or up to LEVELS_UP directories above it."""
    here = Path(model_dir).resolve()
    for directory in [here, *here.parents][: LEVELS_UP + 1]:
        candidate = directory / RUN_CONFIG
        if candidate.is_file() and is_run_config(candidate):
            return candidate
    return None


def eval_config(model_dir: str, recipe: str | None, overrides: list[str]) -> EvalConfig:
    """`--recipe` if given, else the run's own config above `model_dir`, else the default recipe;
    then `overrides`, then `model.path=model_dir`."""
    overrides = [*overrides, f"model.path={model_dir}"]
    if recipe is not None:
        return EvalConfig(load_config(recipe, overrides), f"recipe {recipe} (--recipe)")
    run_config = find_run_config(model_dir)
    if run_config is None:
        source = f"recipe default (no run {RUN_CONFIG} in or above {model_dir}; --recipe NAME to choose one)"
        return EvalConfig(load_config("default", overrides), source)
    try:
        cfg = load_config(str(run_config), overrides)
    except ConfigError as err:
        raise ConfigError(
            f"{run_config}, the config of the run that holds --model {model_dir}, does not load: {err}. "
            "Fix it, or pass --recipe NAME to evaluate under another recipe"
        ) from None
    return EvalConfig(cfg, f"{run_config} (the run's own config, found at or above --model; --recipe NAME to use another)")
