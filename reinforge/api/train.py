"""`reinforge.train`: the `reinforge train` pipeline from Python, with your own parts as objects.

    result = reinforge.train("default", {"trainer.steps": 50}, reward_fns=[close_to_answer])
    result.accuracy_after, result.run_dir

Every object argument becomes the string the config holds for it (api.objects.config_name: its
import path when its module exposes it, else a `<python ...>` label bound in this process), so the
run takes exactly the code path of a recipe that names the same parts, and the run directory's
config.yaml says what was used. `check_in_memory_parts` refuses, before any compute, a labelled
object that would have to cross to a place that cannot receive it (a Ray worker, a data-parallel
learner, a reward worker process that cannot unpickle it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import pickle
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reinforge.api.config import Overrides, config_with, load_config, override_items, plain
from reinforge.api.objects import config_name, tasks_label
from reinforge.config import Config, ConfigError
from reinforge.import_paths import is_in_memory

# Set while reinforge.train runs; inherited by every worker process it starts. A worker that
# imports the user's script (to find a function passed from it) and reaches an unguarded
# reinforge.train() call at its top level would otherwise start a second run inside the worker.
TRAINING_PID_VAR = "REINFORGE_TRAINING_PID"


@dataclass(frozen=True)
class TrainResult:
    """What a run produced. `steps` are the RL steps' metrics (as in RUN/metrics.jsonl), `evals`
    the held-out evaluations ({"step", "accuracy", "mean@k", ...}; the first before RL, the last
    after), `rewards` the mean reward of each RL step."""

    run_dir: Path
    config: Config
    accuracy_before: float
    accuracy_after: float
    rewards: list[float]
    steps: list[dict]
    evals: list[dict]
    seconds: dict[str, float]

    @property
    def final_model(self) -> Path:
        """The trained policy, a Hugging Face model directory (reinforge.evaluate takes it)."""
        return self.run_dir / "final"


def train(
    config: Config | str | os.PathLike = "default",
    overrides: Overrides = (),
    *,
    reward_fns: Sequence[Any] | None = None,
    env: Any = None,
    env_params: Mapping[str, Any] | None = None,
    tasks: Any = None,
    tools: Sequence[Any] | None = None,
    advantage: Any = None,
    policy_loss: Any = None,
    model: str | os.PathLike | None = None,
    output_dir: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    checkpoint: str | os.PathLike | None = None,
    force: bool = False,
    **sections: Any,
) -> TrainResult:
    """Run `reinforge train`: supervised warm-up (if the config has one), RL, held-out evaluation.

    config      a Config (reinforge.load_config), or a shipped recipe's name or a YAML path
    overrides   'key=value' strings or a dict ({"algo.lr": 1e-5}); keyword sections too
                (trainer={"steps": 20})
    reward_fns  replaces reward.components: each entry a function / class / instance (the contract
                of reward.components[].fn), a (name, fn), (name, fn, weight) or
                (name, fn, weight, params) tuple, or a dict like a config component
    env         env.type: an Env class (built as cls(tokenizer, **env_params)) or an
                adapter-shaped env; `env_params` become env.params
    tasks       task.source: a list of Task (held out as a JSONL file is), a TaskSplits, or a
                source function load(cfg, seed) / an object with load() and check()
    tools       env.tools: built-in tool names, Tools or typed, docstringed functions (env.type=tool)
    advantage, policy_loss   algo.advantage / algo.policy_loss as functions
    model       a local Hugging Face model directory (skips the warm-up unless sft.steps is set)
    output_dir  the run directory (default runs/<timestamp>)
    resume      continue the run in this directory from its newest checkpoint (or `checkpoint`);
                pass the same Python objects again; `force` accepts changes that break exactness

    Raises ConfigError (naming the key) before any model is loaded when the config cannot run, and
    reinforge.trainer.run_errors.RunInterrupted when SIGINT / SIGTERM stopped the run after a
    checkpoint (continue it with resume=RUN_DIR).
    """
    refuse_nested_run()
    values = part_values(reward_fns, env, env_params, tasks, tools, advantage, policy_loss)
    items = [*override_items(overrides, sections), *override_items(values)]
    if model is not None:
        items.append(f"model.path={os.fspath(model)}")
        if not any(i.startswith("sft.steps=") for i in items):
            items.append("sft.steps=0")
    if output_dir is not None:
        items.append(f"trainer.output_dir={os.fspath(output_dir)}")
    if resume is not None:
        if model is not None or output_dir is not None or isinstance(config, Config) or str(config) != "default":
            raise ConfigError("resume= continues a run as it was configured (its config.yaml); config, model and output_dir do not apply")
        from reinforge.config_resume import resume_config

        cfg = resume_config(os.fspath(resume), items, force, None if checkpoint is None else os.fspath(checkpoint))
    elif isinstance(config, Config):
        cfg = config_with(config, items)
    else:
        cfg = load_config(config, items)
    check_in_memory_parts(cfg)

    from transformers.utils import logging as hf_logging

    from reinforge.trainer.pipeline import run_training

    hf_logging.disable_progress_bar()  # the run's own display covers progress
    with training_guard():
        outcome = run_training(cfg, resume=resume is not None, checkpoint=None if checkpoint is None else Path(checkpoint))
    rl = outcome.rl
    return TrainResult(
        outcome.run_dir, cfg, outcome.accuracy_before, outcome.accuracy_after, rl.rewards, rl.steps, rl.evals, rl.seconds
    )


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


def check_in_memory_parts(cfg: Config) -> None:
    """ConfigError for a `<python ...>` part that a worker would have to re-create."""
    for i, component in enumerate(cfg.reward.components):
        if not is_in_memory(component.fn):
            continue
        key = f"reward.components[{i}] ({component.name})"
        if cfg.workers.reward_workers > 0:
            raise ConfigError(
                f"{key}: {component.fn} exists only in this process, and Ray reward workers (workers.reward_workers="
                f"{cfg.workers.reward_workers}) build rewards by import path: define it at module level (in a module, or "
                "in your script under an `if __name__ == '__main__':` guard), or set workers.reward_workers=0"
            )
        if cfg.reward.isolation == "process":
            _check_sendable(key, component)
    if cfg.workers.learners > 1 and is_in_memory(cfg.algo.policy_loss):
        raise ConfigError(
            f"algo.policy_loss: {cfg.algo.policy_loss} exists only in this process, and the data-parallel learners "
            f"(workers.learners={cfg.workers.learners}) import the loss by path: define it at module level, or set workers.learners=1"
        )


def _check_sendable(key: str, component: Any) -> None:
    """A labelled reward goes to reward worker processes pickled (rewards.scorer.worker_spec):
    refuse it now, with the fixes, when it would not arrive."""
    from reinforge.rewards.builtin import build_component
    from reinforge.rewards.scorer import NamedReward, runs_in_process

    try:
        fn, _ = build_component(component.fn, component.params)
    except ValueError as err:
        raise ConfigError(f"{key}: {err}") from None
    if runs_in_process(NamedReward(component.name, fn, component.weight)):
        return
    problem = unpicklable(fn)
    if problem is not None:
        raise ConfigError(
            f"{key}: {component.fn} cannot be sent to a reward worker process ({problem}). Reward functions run in "
            "worker processes so that a timeout can stop them: define it at module level (a module, or your script "
            "guarded by `if __name__ == '__main__':`; workers import it by path), or set reward.isolation=thread "
            "(it then runs in the trainer's threads, where a hung call cannot be stopped)"
        )


class _NoMainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module in ("__main__", "__mp_main__"):
            raise pickle.UnpicklingError(f"it refers to {name}, defined in the script being run (__main__), which a worker process cannot import")
        return super().find_class(module, name)


def unpicklable(obj: Any) -> str | None:
    """Why a fresh interpreter could not unpickle `obj`, or None when it could."""
    try:
        data = pickle.dumps(obj)
        _NoMainUnpickler(io.BytesIO(data)).load()
    except Exception as err:  # noqa: BLE001 - pickling raises many types
        return f"{type(err).__name__}: {err}"
    return None


def refuse_nested_run() -> None:
    """A run started inside a worker of another run is the user's script re-imported there."""
    owner = os.environ.get(TRAINING_PID_VAR)
    if owner is not None and owner != str(os.getpid()):
        raise RuntimeError(
            f"reinforge.train() was called in a worker process of the run in process {owner}: the worker imported your "
            "script to find a function you passed, and the script's top level started training again. Put the "
            "training call under `if __name__ == '__main__':` (as multiprocessing requires)"
        )


@contextlib.contextmanager
def training_guard() -> Iterator[None]:
    """Mark the worker processes this run starts (refuse_nested_run reads the mark)."""
    refuse_nested_run()
    owner = os.environ.get(TRAINING_PID_VAR)
    os.environ[TRAINING_PID_VAR] = str(os.getpid())
    try:
        yield
    finally:
        if owner is None:
            os.environ.pop(TRAINING_PID_VAR, None)
