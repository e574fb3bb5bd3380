"""Where a part handed over from Python must travel, and whether it can.

A part named by import path reaches every worker by that path. A `<python ...>` label exists only
in the trainer's process: `check_in_memory_parts` refuses, before any compute, one that a Ray
worker, a data-parallel learner or a reward worker process (which gets it pickled) could not
receive. `training_guard` marks the processes a run starts, so that a worker importing the user's
script (to find a function defined there) cannot start a second run from its top level.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
from collections.abc import Iterator
from typing import Any

from reinforge.config import Config, ConfigError
from reinforge.import_paths import is_in_memory

# Set while reinforge.train runs; inherited by every worker process it starts. A worker that
# imports the user's script (to find a function passed from it) and reaches an unguarded
# reinforge.train() call at its top level would otherwise start a second run inside the worker.
TRAINING_PID_VAR = "REINFORGE_TRAINING_PID"


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
    if cfg.env.type == "gateway" and is_in_memory(cfg.env.agent):
        from reinforge.import_paths import load_object

        problem = unpicklable(load_object(cfg.env.agent))
        if problem is not None:
            raise ConfigError(
                f"env.agent: {cfg.env.agent} cannot be sent to the agent process ({problem}). Agents run in a separate "
                "process so that a hung one can be stopped: define it at module level (a module, or your script guarded by "
                "`if __name__ == '__main__':`)"
            )
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
