"""The task source for envs that make their own problems: seeds only, train and held-out disjoint."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.envs.adapters.seeds import task_seed
from reinforge.tasks.registry import check_task_config, load_tasks

SOURCE = "task.source=reinforge.envs.adapters:seed_tasks"


def test_seed_tasks_number_their_seeds_and_hold_out_later_ones() -> None:
    cfg = load_config("default", [SOURCE, "task.train_size=5", "task.eval_size=3", "task.params={prompt: 'Guess my number.'}"])
    check_task_config(cfg.task)
    splits = load_tasks(cfg.task, seed=0)
    assert [task_seed(t) for t in splits.train] == [0, 1, 2, 3, 4]
    assert [task_seed(t) for t in splits.eval] == [5, 6, 7]
    assert all(t.prompt == "Guess my number." and t.answer == "" for t in splits.train + splits.eval)


def test_seed_tasks_refuse_unknown_params() -> None:
    with pytest.raises(ConfigError, match="seed_tasks takes only 'prompt', got size"):
        check_task_config(load_config("default", [SOURCE, "task.params={size: 3}"]).task)
