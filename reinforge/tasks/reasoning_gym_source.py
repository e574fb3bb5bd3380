"""Tasks from reasoning-gym: ~100 procedural generators with their own answer checkers.

`task.dataset` names the generator and `task.params` is its config (for example
`{min_terms: 2, max_terms: 4}` for chain_sum). Each task keeps the generated entry in its
metadata, because reasoning-gym's scorers read more than the answer string from it. Prompts are
the bare questions; `DEFAULT_INSTRUCTION` is added to them unless `task.instruction` replaces it
(tasks.prompting, applied by tasks.registry.load_tasks).
"""

from __future__ import annotations

import logging
from typing import Any

import reasoning_gym
from reasoning_gym.factory import DATASETS

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks.task import Task, TaskSplits

log = logging.getLogger(__name__)

DEFAULT_INSTRUCTION = "Give your final answer inside <answer></answer> tags."

# seed and size are set from trainer.seed and task.train_size / task.eval_size.
_MANAGED_PARAMS = ("seed", "size")


def _dataset_name(cfg: TaskConfig) -> str:
    if cfg.dataset is None:
        raise ConfigError("task.dataset: source=reasoning_gym needs a dataset name, e.g. task.dataset=chain_sum")
    if cfg.dataset not in DATASETS:
        raise ConfigError(f"task.dataset: unknown reasoning-gym dataset {cfg.dataset!r}; valid: {', '.join(sorted(DATASETS))}")
    return cfg.dataset


def _create(cfg: TaskConfig, seed: int, size: int) -> Any:
    name = _dataset_name(cfg)
    managed = [k for k in _MANAGED_PARAMS if k in cfg.params]
    if managed:
        raise ConfigError(f"task.params: {managed} are set by trainer.seed and task.train_size/eval_size, remove them")
    try:
        return reasoning_gym.create_dataset(name, seed=seed, size=size, **cfg.params)
    except Exception as err:  # reasoning-gym reports bad params as TypeError, AssertionError, ValueError...
        reason = str(err) or type(err).__name__
        raise ConfigError(f"task.params: invalid parameters for reasoning-gym dataset {name!r}: {reason}") from None


def check(cfg: TaskConfig) -> None:
    """Instantiate the generator with one item and generate it: catches bad names and params."""
    dataset = _create(cfg, seed=0, size=1)
    try:
        dataset[0]
    except Exception as err:
        reason = str(err) or type(err).__name__
        raise ConfigError(f"task.params: reasoning-gym dataset {cfg.dataset!r} cannot generate with {cfg.params}: {reason}") from None


def make_task(dataset: str, split: str, index: int, entry: dict[str, Any]) -> Task:
    """Some generators (graph_color, rush_hour, ...) have no single oracle answer (None): their
    tasks get an empty answer and no demonstration, since there is nothing to imitate."""
    oracle = entry["answer"]
    return Task(
        id=f"{dataset}/{split}/{index}",
        prompt=entry["question"],
        answer="" if oracle is None else str(oracle),
        verifier="reasoning_gym",
        # Warm-up teaches the answer format the prompt asks for.
        demonstration=None if oracle is None else f"<answer>{oracle}</answer>",
        metadata={"dataset": dataset, "family": dataset, "entry": entry},
    )


def load(cfg: TaskConfig, seed: int) -> TaskSplits:
    """`task.train_size` training and up to `task.eval_size` held-out tasks.

    Most generators build item i from `Random(seed + i)`, so seeds `s` and `s + 1` would share
    all but one item: the held-out seed starts past the last training item. Generators with a
    small problem space still repeat questions, so held-out tasks whose question is also a
    training question are dropped.
    """
    name = _dataset_name(cfg)
    train_entries = list(_create(cfg, seed=seed, size=cfg.train_size))
    eval_entries = list(_create(cfg, seed=seed + cfg.train_size, size=cfg.eval_size))

    train_questions = {e["question"] for e in train_entries}
    generated = len(eval_entries)
    eval_entries = [e for e in eval_entries if e["question"] not in train_questions]
    if eval_entries and len(eval_entries) < generated:
        log.warning(
            "task.eval_size=%d, but only %d held-out tasks remain: %d of the generated held-out questions are also "
            "training questions and were dropped (evaluation must not measure memorisation). reasoning-gym dataset %r "
            "with task.params=%s has few distinct problems: lower task.train_size (now %d) or widen task.params",
            cfg.eval_size, len(eval_entries), generated - len(eval_entries), name, cfg.params, cfg.train_size,
        )
    if not eval_entries:
        raise ConfigError(
            f"reasoning-gym dataset {name!r} with {cfg.params}: every held-out question also appears in training; "
            "lower task.train_size or make the problems harder"
        )
    return TaskSplits(
        train=[make_task(name, "train", i, e) for i, e in enumerate(train_entries)],
        eval=[make_task(name, "eval", i, e) for i, e in enumerate(eval_entries)],
    )
