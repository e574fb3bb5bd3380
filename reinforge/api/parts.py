"""The object arguments of reinforge.train / reinforge.evaluate as the config keys they set.

Each object becomes the string the config holds (api.objects.config_name); tasks handed over in
memory become a task source under a `<python tasks: ...>` label.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from reinforge.api.config import plain
from reinforge.api.objects import config_name, tasks_label
from reinforge.config import ConfigError
from reinforge.import_paths import is_in_memory


def part_values(
    reward_fns: Sequence[Any] | None, env: Any, env_params: Mapping[str, Any] | None, tasks: Any,
    tools: Sequence[Any] | None, advantage: Any, policy_loss: Any,
) -> dict[str, Any]:
    """The dotted config keys the object arguments set."""
    values: dict[str, Any] = {}
    if reward_fns is not None:
        values["reward.components"] = reward_components(reward_fns)
    if env is not None:
        values["env.type"] = env_name(env)
    if env_params is not None:
        values["env.params"] = dict(env_params)
    if tasks is not None:
        values["task.source"] = task_source_name(tasks)
    if tools is not None:
        values["env.tools"] = [config_name(tool) for tool in tools]
    if advantage is not None:
        values["algo.advantage"] = config_name(advantage)
    if policy_loss is not None:
        values["algo.policy_loss"] = config_name(policy_loss)
    return values


def reward_components(entries: Sequence[Any]) -> list[dict[str, Any]]:
    """`reward_fns` entries as reward.components: [{name, fn, weight, params}, ...]."""
    if isinstance(entries, (str, Mapping)) or not isinstance(entries, Sequence) or not entries:
        raise ConfigError(f"reward_fns must be a non-empty list of reward functions, got {entries!r}")
    components = []
    for i, entry in enumerate(entries):
        where = f"reward_fns[{i}]"
        if isinstance(entry, Mapping):
            component = dict(entry)
            if "fn" not in component:
                raise ConfigError(f"{where}: a dict entry needs 'fn' (and 'name'; optional 'weight', 'params'), got {entry!r}")
            component.setdefault("name", default_name(component["fn"], i))
        elif isinstance(entry, tuple):
            if not 2 <= len(entry) <= 4:
                raise ConfigError(f"{where}: a tuple entry is (name, fn), (name, fn, weight) or (name, fn, weight, params), got {entry!r}")
            component = dict(zip(("name", "fn", "weight", "params"), entry))
        else:
            component = {"name": default_name(entry, i), "fn": entry}
        if not isinstance(component["fn"], str) and not callable(component["fn"]):
            raise ConfigError(f"{where}: fn is a {type(component['fn']).__name__}, not a function, a class or an import path")
        components.append(plain(component, where))
    return components


def default_name(fn: Any, index: int) -> str:
    """A component's name when none is given: the function's or class's name, else reward_<i>."""
    if isinstance(fn, str):
        return re.split(r"[:.]", fn)[-1]
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return name if name.isidentifier() else f"reward_{index}"


def env_name(env: Any) -> str:
    if isinstance(env, str):
        return env
    methods = ("episode", "prompt_ids", "sft_example", "decode_response")
    if not isinstance(env, type) and all(callable(getattr(env, m, None)) for m in methods):
        raise ConfigError(
            f"env: pass the class {type(env).__name__}, not an instance: reinforge builds it as "
            "cls(tokenizer, **env_params) once the tokenizer exists"
        )
    return config_name(env)


def task_source_name(tasks: Any) -> str:
    """task.source for tasks handed over in memory (a list or a TaskSplits), or a source object."""
    from reinforge.tasks.task import Task, TaskSplits

    if isinstance(tasks, str) or callable(tasks) or (hasattr(tasks, "load") and not isinstance(tasks, TaskSplits)):
        return config_name(tasks)
    if isinstance(tasks, TaskSplits):
        everything = [*tasks.train, *tasks.eval]
        what = f"TaskSplits of {len(tasks.train)} train and {len(tasks.eval)} held-out tasks"
    elif isinstance(tasks, Sequence):
        everything = list(tasks)
        what = f"{len(everything)} tasks"
    else:
        raise ConfigError(f"tasks: a list of reinforge.Task, a TaskSplits, or a source function, got a {type(tasks).__name__}")
    bad = next((t for t in everything if not isinstance(t, Task)), None)
    if bad is not None:
        raise ConfigError(f"tasks: every item must be a reinforge.Task (Task(id=..., prompt=..., answer=...)), got a {type(bad).__name__}")
    if any(callable(t.verifier) for t in everything):
        tasks = _named_verifiers(tasks)
    return tasks_label(what, repr(tasks), InMemoryTasks(tasks))


def _named_verifiers(tasks: Any) -> Any:
    """Tasks whose verifier is a function, with the function's import path instead: verifiers run
    in reward worker processes, which find them by path (a Task holds a name or a path)."""
    from reinforge.tasks.task import TaskSplits

    def named(task: Any) -> Any:
        if not callable(task.verifier):
            return task
        path = config_name(task.verifier)
        if is_in_memory(path):
            raise ConfigError(
                f"tasks: task {task.id}'s verifier {path} has no import path, and verifiers run in reward worker "
                "processes that find them by path: define it at module level (a module, or your guarded script)"
            )
        return dataclasses.replace(task, verifier=path)

    if isinstance(tasks, TaskSplits):
        return TaskSplits([named(t) for t in tasks.train], [named(t) for t in tasks.eval])
    return [named(t) for t in tasks]


class InMemoryTasks:
    """A task source for tasks handed over in memory (tasks.user_source takes it like a module)."""

    def __init__(self, tasks: Any) -> None:
        self.tasks = tasks

    def load(self, cfg: Any, seed: int) -> Any:
        return self.tasks if not isinstance(self.tasks, Sequence) else list(self.tasks)
