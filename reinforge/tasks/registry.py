"""Task sources by name: `task.source` in the config selects one.

A source is any object (usually a module) with `load(cfg, seed) -> TaskSplits` and
`check(cfg)`, and optionally `DEFAULT_INSTRUCTION`, the instruction its questions get unless
`task.instruction` says otherwise. `load_tasks` then applies the recipe's prompt settings
(instruction, system prompt, answer extractor) to every source's tasks alike (tasks.prompting). Built-in sources are imported on first use, so naming a source costs nothing
until it is loaded (reasoning-gym alone takes seconds to import). To add a built-in source, write
one module with those two functions and add one line to `TASK_SOURCES`; a user's own source is
named by import path instead (tasks.user_source).
"""

from __future__ import annotations

import importlib
from typing import Protocol

from reinforge.config import ConfigError, TaskConfig
from reinforge.import_paths import ImportPathError, is_import_path, resolve_part
from reinforge.tasks.prompting import apply_prompt_settings, check_prompt_settings
from reinforge.tasks.task import TaskSplits

__all__ = ["TASK_SOURCES", "LazySource", "TaskSource", "TaskSplits", "check_task_config", "load_tasks"]


class TaskSource(Protocol):
    def load(self, cfg: TaskConfig, seed: int) -> TaskSplits: ...

    def check(self, cfg: TaskConfig) -> None: ...


class LazySource:
    """A source module named by its import path, imported when first used."""

    def __init__(self, module: str) -> None:
        self.module = module

    def load(self, cfg: TaskConfig, seed: int) -> TaskSplits:
        return importlib.import_module(self.module).load(cfg, seed)

    def check(self, cfg: TaskConfig) -> None:
        importlib.import_module(self.module).check(cfg)

    def default_instruction(self) -> str | None:
        return getattr(importlib.import_module(self.module), "DEFAULT_INSTRUCTION", None)

    def __repr__(self) -> str:
        return f"LazySource({self.module!r})"


TASK_SOURCES: dict[str, TaskSource] = {
    "arithmetic": LazySource("reinforge.tasks.arithmetic"),
    "game": LazySource("reinforge.games.tasks"),
    "hf_dataset": LazySource("reinforge.tasks.hf_dataset_source"),
    "jsonl": LazySource("reinforge.tasks.jsonl_source"),
    "reasoning_gym": LazySource("reinforge.tasks.reasoning_gym_source"),
    "text_game": LazySource("reinforge.textgames.tasks"),
}


def get_source(name: str) -> TaskSource:
    """A built-in source by name, or the user's own by import path (tasks.user_source)."""
    try:
        if is_import_path(name):
            from reinforge.tasks.user_source import UserSource

            return UserSource(name)
        return resolve_part(name, TASK_SOURCES, "task source")
    except ImportPathError as err:
        raise ConfigError(f"task.source: {err}") from None


def check_task_config(cfg: TaskConfig) -> None:
    """Validate the task section before any compute: unknown source, missing file, bad params."""
    check_prompt_settings(cfg)
    get_source(cfg.source).check(cfg)


def source_instruction(cfg: TaskConfig) -> str | None:
    """The instruction added to every question: task.instruction, else the source's default (a
    user's source writes its own prompts whole)."""
    if cfg.instruction is not None:
        return cfg.instruction
    source = get_source(cfg.source)
    return source.default_instruction() if isinstance(source, LazySource) else None


def load_tasks(cfg: TaskConfig, seed: int) -> TaskSplits:
    """The source's tasks, with the recipe's instruction, system prompt and answer extractor."""
    splits = get_source(cfg.source).load(cfg, seed)
    if not splits.train:
        raise ConfigError(f"task source {cfg.source!r} produced no training tasks")
    return apply_prompt_settings(splits, cfg, source_instruction(cfg))
