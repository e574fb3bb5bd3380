"""A task source of the user's own, named by import path in `task.source`.

The contract (docs/extending.md): the path names either

- a function `load(cfg: TaskConfig, seed: int)` returning a `TaskSplits` (train and held-out tasks)
  or a list of `Task`s (then `task.eval_size` of them, at most half, are held out with `seed`, and
  training tasks whose prompt is held out are dropped, as for JSONL files), or
- an object (a module, a class instance) with that `load` and, optionally, `check(cfg)`, which
  validates the config before any model is loaded (raise ValueError / ConfigError with a message).

`cfg.params` carries the source's own parameters from `task.params`.
"""

from __future__ import annotations

import inspect
from typing import Any

from reinforge.config import ConfigError, TaskConfig
from reinforge.import_paths import ImportPathError, check_call, describe, load_object
from reinforge.tasks.task import Task, TaskSplits, drop_held_out_prompts, hold_out

CONTRACT = (
    "a task source is a function load(cfg: TaskConfig, seed: int) -> TaskSplits | list[Task], or a module / "
    "object with that load() and optionally check(cfg)"
)


class UserSource:
    """Adapts the user's load (and check) to the TaskSource protocol of tasks.registry."""

    def __init__(self, path: str, target: Any | None = None) -> None:
        self.path = path
        target = load_object(path) if target is None else target
        load = target if inspect.isfunction(target) or inspect.ismethod(target) else getattr(target, "load", None)
        if load is None:
            raise ImportPathError(f"{path} ({describe(target)}) has no load(cfg, seed); {CONTRACT}")
        check_call(load, (None, 0), {}, f"{path}: load", CONTRACT)
        check = None if load is target else getattr(target, "check", None)
        if check is not None:
            check_call(check, (None,), {}, f"{path}: check", CONTRACT)
        self._load, self._check = load, check

    def check(self, cfg: TaskConfig) -> None:
        if self._check is not None:
            try:
                self._check(cfg)
            except ConfigError:
                raise
            except Exception as err:  # noqa: BLE001 - the user's check: its message is the config error
                raise ConfigError(f"task.source {self.path}: check failed: {type(err).__name__}: {err}") from None

    def load(self, cfg: TaskConfig, seed: int) -> TaskSplits:
        try:
            loaded = self._load(cfg, seed)
        except ConfigError:
            raise
        except Exception as err:  # noqa: BLE001 - any error of the user's loader, named
            raise ConfigError(f"task.source {self.path}: load failed: {type(err).__name__}: {err}") from err
        if isinstance(loaded, TaskSplits):
            splits = loaded
            self._check_types(splits.train, "train")
            self._check_types(splits.eval, "eval")
        elif isinstance(loaded, (str, bytes, dict)) or not hasattr(loaded, "__iter__"):
            raise ConfigError(f"task.source {self.path}: load returned a {type(loaded).__name__}; {CONTRACT}")
        else:
            tasks = list(loaded)
            self._check_types(tasks, "returned")  # before holding out, which reads their prompts
            train, held = hold_out(tasks, cfg.eval_size, seed)
            splits = TaskSplits(train=drop_held_out_prompts(train, held), eval=held)
            if train and not splits.train:
                raise ConfigError(
                    f"task.source {self.path}: every training task's prompt is also among the {len(held)} held-out "
                    "tasks, so none is left to train on (training tasks whose prompt is held out are dropped, so "
                    "that evaluation never measures memorisation); give tasks distinct prompts, or return a "
                    "TaskSplits(train=..., eval=...) to choose the held-out tasks yourself"
                )
        self._check_verifiers([*splits.train, *splits.eval])
        if not splits.eval:
            raise ConfigError(f"task.source {self.path}: no held-out tasks (return at least 2 tasks, or a TaskSplits with eval tasks)")
        return splits

    def _check_types(self, tasks: list, where: str) -> None:
        bad = next((t for t in tasks if not isinstance(t, Task)), None)
        if bad is not None:
            raise ConfigError(
                f"task.source {self.path}: load returned a {type(bad).__name__} among the {where} tasks; "
                "it must return reinforge.Task objects (Task(id=..., prompt=..., answer=...))"
            )

    def _check_verifiers(self, tasks: list[Task]) -> None:
        """Every verifier the tasks name exists (a built-in, or the user's own by import path): a
        wrong one fails now, not as a failed reward on every sample of the run."""
        from reinforge.tasks.verifiers import UnknownVerifierError, get_verifier

        first_task: dict[str, str] = {}
        for task in tasks:
            first_task.setdefault(task.verifier, task.id)
        for verifier, task_id in first_task.items():
            try:
                get_verifier(verifier)
            except UnknownVerifierError as err:
                raise ConfigError(f"task.source {self.path}: task {task_id!r} (and any other with verifier={verifier!r}): {err.args[0]}") from None

    def __repr__(self) -> str:
        return f"UserSource({self.path!r})"
