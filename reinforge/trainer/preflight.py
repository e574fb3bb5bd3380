"""Checks that run before any model is loaded (invariant 3: validate before compute)."""

from __future__ import annotations

from pathlib import Path

from reinforge.algos.registry import get_estimator
from reinforge.config import Config, ConfigError
from reinforge.models.loading import ModelLoadError, check_model_dir
from reinforge.models.tiny_llama import PRESETS
from reinforge.rewards.builtin import build_reward_fn
from reinforge.tasks.registry import check_task_config


def preflight(cfg: Config) -> None:
    """Raise ConfigError naming the key and the fix for every config that cannot run."""
    check_task_config(cfg.task)

    try:
        estimator = get_estimator(cfg.algo.advantage)
    except ValueError as err:
        raise ConfigError(f"algo.advantage: {err}") from None
    if cfg.rollout.group_size < estimator.min_group_size:
        raise ConfigError(
            f"rollout.group_size={cfg.rollout.group_size} but algo.advantage={cfg.algo.advantage!r} compares "
            f"samples within a group and needs group_size >= {estimator.min_group_size}"
        )
    samples = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    if samples % cfg.algo.mini_batches:
        raise ConfigError(
            f"algo.mini_batches={cfg.algo.mini_batches} does not divide the {samples} samples per step "
            f"(rollout.prompts_per_step x rollout.group_size); pick a divisor of {samples}"
        )

    for i, component in enumerate(cfg.reward.components):
        try:
            build_reward_fn(component.fn, component.params)
        except ValueError as err:
            raise ConfigError(f"reward.components[{i}] ({component.name}): {err}") from None

    if cfg.model.path is not None:
        try:
            check_model_dir(cfg.model.path)
        except ModelLoadError as err:
            raise ConfigError(f"model.path: {err}") from None
    elif cfg.model.preset not in PRESETS:
        raise ConfigError(f"model.preset: unknown preset {cfg.model.preset!r}; valid: {', '.join(PRESETS)}")

    if cfg.trainer.output_dir is not None:
        out = Path(cfg.trainer.output_dir)
        if out.exists() and any(out.iterdir()):
            raise ConfigError(f"trainer.output_dir={out} already holds files; choose a new directory")
