"""Task sources are selected by name; unknown names fail with the list of valid ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks import registry
from reinforge.tasks.task import Task, TaskSplits


def test_builtin_sources_are_registered() -> None:
    assert {"arithmetic", "jsonl", "reasoning_gym"} <= set(registry.TASK_SOURCES)
    for source in registry.TASK_SOURCES.values():
        assert callable(source.load) and callable(source.check)


def test_unknown_source_lists_valid_ones() -> None:
    with pytest.raises(ConfigError) as err:
        registry.check_task_config(TaskConfig(source="csv"))
    message = str(err.value)
    assert "'csv'" in message and "arithmetic" in message and "jsonl" in message and "reasoning_gym" in message
    with pytest.raises(ConfigError, match="'csv'"):
        registry.load_tasks(TaskConfig(source="csv"), seed=0)


def test_check_delegates_to_the_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        registry.check_task_config(TaskConfig(source="jsonl", path=str(tmp_path / "missing.jsonl")))


def test_load_tasks_from_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "answer": i}) + "\n" for i in range(10)))
    cfg = TaskConfig(source="jsonl", path=str(path), eval_size=3)
    registry.check_task_config(cfg)
    splits = registry.load_tasks(cfg, seed=0)
    assert isinstance(splits, TaskSplits) and len(splits.train) == 7 and len(splits.eval) == 3


def test_custom_source_can_be_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    class OneTask:
        def check(self, cfg: TaskConfig) -> None:
            pass

        def load(self, cfg: TaskConfig, seed: int) -> TaskSplits:
            task = Task(id="only", prompt="hi", answer="hi")
            return TaskSplits(train=[task], eval=[task])

    monkeypatch.setitem(registry.TASK_SOURCES, "one", OneTask())
    registry.check_task_config(TaskConfig(source="one"))
    assert registry.load_tasks(TaskConfig(source="one"), seed=0).train[0].id == "only"


def test_empty_training_set_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Nothing:
        def check(self, cfg: TaskConfig) -> None:
            pass

        def load(self, cfg: TaskConfig, seed: int) -> TaskSplits:
            return TaskSplits(train=[], eval=[])

    monkeypatch.setitem(registry.TASK_SOURCES, "nothing", Nothing())
    with pytest.raises(ConfigError, match="no training tasks"):
        registry.load_tasks(TaskConfig(source="nothing"), seed=0)
