"""Reward functions of the user's own, named by import path in `reward.components[].fn`.

The contract (docs/extending.md):

- a function `fn(task, trajectory, **params) -> float`: `params` from the config are bound as
  keywords; `trajectory.response_text` is the decoded response, `task.answer` the reference;
- a class, built once as `cls(**params)`, whose instances are called as `obj(task, trajectory)`;
- either one marked as a group reward (`@group_reward`, or a class attribute `group = True`):
  called once per group as `fn(task, trajectories) -> list[float]`, one score per trajectory;
- an agent's reward `fn(task, result, transcript, **params) -> float` (the gateway env's form): a
  function that cannot be called as fn(task, trajectory, **params) but can with three arguments
  is called with what the agent returned (`trajectory.agent_result`; for other envs, the response
  text) and the episode's OpenAI messages (the gateway's transcript).

Optional attributes, as on the built-ins: `deterministic = False` (the scorer must not cache its
scores), `score_batch(tasks, trajectories)` (one call for a whole batch). A user's reward runs
exactly where a built-in one runs (a killable worker process by default, or a Ray worker), so a
raise, a hang or a non-number is counted against its component like any other failure.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from reinforge.import_paths import ImportPathError, check_call, describe, load_object

F = TypeVar("F", bound=Callable)

CONTRACT = (
    "a reward is a function fn(task, trajectory, **params) -> float, a class built with **params whose "
    "instances are called as obj(task, trajectory) -> float, or either one marked @reinforge.group_reward, "
    "called as fn(task, trajectories) -> list[float], or an agent's reward fn(task, result, transcript, **params) -> float"
)


def takes_agent_result(fn: Callable, params: dict[str, Any]) -> bool:
    """Whether `fn(task, result, transcript, **params)` binds."""
    try:
        inspect.signature(fn).bind(None, None, None, **params)
    except (TypeError, ValueError):
        return False
    return True


def episode_messages(trajectory: Any) -> list[dict]:
    """The OpenAI messages of an agent episode (gateway env), from its transcript."""
    return [turn["message"] for turn in trajectory.transcript if isinstance(turn, dict) and "message" in turn]


class AgentResultReward:
    """fn(task, result, transcript, **params) as a reward fn(task, trajectory). A module-level
    class, so it pickles to a reward worker process with the function it wraps."""

    def __init__(self, fn: Callable, params: dict[str, Any]):
        self.fn, self.params = fn, dict(params)
        for attr in ("deterministic", "in_process", "mean_metric"):
            if hasattr(fn, attr):
                setattr(self, attr, getattr(fn, attr))

    def __call__(self, task: Any, trajectory: Any) -> float:
        result = trajectory.agent_result if trajectory.agent_result is not None else trajectory.response_text
        return self.fn(task, result, episode_messages(trajectory), **self.params)


def group_reward(fn: F) -> F:
    """Mark a reward function (or class) as scoring a whole group at once: (task, trajectories) -> list[float]."""
    fn.group = True
    return fn


def build_user_reward(path: str, params: dict[str, Any]) -> tuple[Callable, bool]:
    """(callable, is_group) for the reward named by `path`; ImportPathError naming what is wrong."""
    return reward_from_object(load_object(path), params, path)


def reward_from_object(obj: Any, params: dict[str, Any], label: str | None = None) -> tuple[Callable, bool]:
    """The same for an object handed over from Python (reinforge.train(reward_fns=[...]))."""
    label = label or describe(obj)
    group = bool(getattr(obj, "group", False))
    second = "trajectories" if group else "trajectory"
    if inspect.isclass(obj):
        check_call(obj, (), params, f"{label} (built with the component's params)", CONTRACT)
        try:
            fn = obj(**params)
        except Exception as err:  # noqa: BLE001 - the user's constructor: any error is a config error
            raise ImportPathError(f"{label}(**{params}) raised {type(err).__name__}: {err}") from None
        check_call(fn, (None, None), {}, f"an instance of {label}, called as obj(task, {second}),", CONTRACT)
        return fn, group
    if not callable(obj):
        raise ImportPathError(f"{label} is a {type(obj).__name__}, not a function or a class; {CONTRACT}")
    try:
        check_call(obj, (None, None), params, f"{label}, called as fn(task, {second}, **params),", CONTRACT)
    except ImportPathError:
        if group or not takes_agent_result(obj, params):
            raise
        return AgentResultReward(obj, params), False
    if not params:
        return obj, group
    # A partial that keeps the function's attributes (deterministic, group, score_batch...).
    return functools.update_wrapper(functools.partial(obj, **params), obj), group
