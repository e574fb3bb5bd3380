"""TRL `environment_factory` classes (GRPOTrainer's environments), named by import path in `env.type`.

The contract, as TRL documents it: a class built once per episode as `cls(**env.params)` (TRL
builds it with no arguments: leave `env.params` empty for an env written for TRL) with

    reset(**kwargs) -> str | None
    <tool methods>(typed, Google-docstringed arguments) -> result
    get_reward() -> float            (optional)

- `reset` gets the task's fields as keyword arguments (TRL passes a dataset row's columns):
  `answer` and every key of `task.metadata`, those its signature names (all with **kwargs). It
  runs with the global `random` / `numpy.random` seeded from the task (adapters.seeds), so an env
  that samples its own problem gives every episode of a GRPO group the same one. A returned string
  is the user prompt; None means: the task's own prompt.
- Every public method (not starting with '_') other than `reset` and `get_reward` is a tool,
  bound to the episode's instance; its schema is read from its type hints and docstring
  (`tool_from_function`). Async tool methods and an async `get_reward` are run to completion.
- The episode runs as reinforge's tool env does (envs.tool_env, reused): each policy turn is
  parsed for calls in `env.tool_format` (compact `<<name: args>>` or hermes), the results (or
  the error a raising tool gives) come back as tool messages tokenized once; a turn without a call
  is the answer and ends the episode; `env.max_turns`, `env.tool_timeout_s`,
  `env.max_observation_tokens` and `env.valid_call_reward` apply as for the tool env.
- `get_reward()` is called once, when the episode ends by an answer or at `env.max_turns`, and
  reported as `info["env_reward"]`: use it with `reward.components: [{name: env, fn: env_reward}]`.
  Without it, score the final answer with any other reward (e.g. `verifier`).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
from typing import Any

from transformers import PreTrainedTokenizerBase

from reinforge.config import Config
from reinforge.envs.adapters.base import AdapterError, EnvAdapter, lacking, public_methods
from reinforge.envs.adapters.chat_text import reward_info
from reinforge.envs.adapters.seeds import seeded_global_rngs, task_seed
from reinforge.envs.base import StepResult
from reinforge.envs.single_turn import chat_messages
from reinforge.envs.tool_env import ToolEnv, ToolEnvError, ToolEpisode
from reinforge.envs.tools.registry import DEFAULT_TIMEOUT_S, ToolDefinitionError, ToolRegistry, tool_from_function
from reinforge.import_paths import check_call, describe
from reinforge.tasks.task import Task

RESERVED = ("reset", "get_reward")
CONTRACT = (
    "a TRL environment is a class built as cls(**env.params) with reset(**kwargs) -> str | None and public, typed, "
    "docstringed tool methods (optionally get_reward() -> float)"
)


def tool_names(cls: type) -> list[str]:
    return [name for name in public_methods(cls) if name not in RESERVED]


def run_to_completion(value: Any) -> Any:
    """An async method's result (the coroutine is run in this thread), or the value itself."""
    return asyncio.run(value) if inspect.iscoroutine(value) else value


def synchronous(method: Any) -> Any:
    if not inspect.iscoroutinefunction(method):
        return method

    @functools.wraps(method)  # keeps the signature, type hints and docstring the schema is read from
    def run(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(method(*args, **kwargs))

    return run


def tool_registry(instance: Any, names: list[str], timeout_s: float | None) -> ToolRegistry:
    """The instance's tool methods as reinforge Tools, bound to it."""
    registry = ToolRegistry()
    for name in names:
        try:
            registry.register(tool_from_function(synchronous(getattr(instance, name)), name=name, timeout_s=timeout_s or DEFAULT_TIMEOUT_S))
        except ToolDefinitionError as err:
            raise AdapterError(f"tool method {describe(type(instance))}.{name}: {err}") from None
    return registry


def reset_kwargs(reset: Any, task: Task) -> dict[str, Any]:
    fields = {**task.metadata, "answer": task.answer}
    parameters = inspect.signature(reset).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return fields
    return {k: v for k, v in fields.items() if k in parameters}


class TRLToolEnv(ToolEnv):
    """A ToolEnv whose tools are methods of a fresh instance of the user's class per episode."""

    def __init__(self, cls: type, params: dict, tokenizer: PreTrainedTokenizerBase, cfg: Config):
        self.cls, self.params = cls, dict(params)
        self.tool_names = tool_names(cls)
        e = cfg.env
        # The schemas the prompt shows, read from an instance that was never initialised (no
        # side effects); each episode binds the same methods to its own instance.
        schema_registry = tool_registry(cls.__new__(cls), self.tool_names, e.tool_timeout_s)
        super().__init__(tokenizer, schema_registry, e.tool_format, e.max_turns, e.max_observation_tokens, e.tool_timeout_s, e.valid_call_reward)

    def prompt_ids(self, task: Task) -> list[int]:
        return self.episode().reset(task)

    def episode(self) -> "TRLEpisode":
        return TRLEpisode(self)


class TRLEpisode:
    def __init__(self, env: TRLToolEnv):
        self.env = env
        self.foreign: Any = None
        self.inner: ToolEpisode | None = None
        self.steps = 0

    def reset(self, task: Task) -> list[int]:
        env = self.env
        self.foreign = env.cls(**env.params)
        with seeded_global_rngs(task_seed(task)):
            prompt = run_to_completion(self.foreign.reset(**reset_kwargs(self.foreign.reset, task)))
        if prompt is not None and not isinstance(prompt, str):
            raise AdapterError(f"{describe(env.cls)}.reset returned {prompt!r}; a TRL reset returns the prompt string or None")
        view = copy.copy(env)  # the env's parser, chat format and limits, with this instance's tools
        view.registry = tool_registry(self.foreign, env.tool_names, env.tool_timeout_s)
        self.inner = ToolEpisode(view)
        self.inner.task = task
        messages = [{"role": "user", "content": prompt}] if prompt else chat_messages(task)
        return env.chat.prompt_ids(messages)

    def step(self, turn_text: str, finish_reason: str) -> StepResult:
        self.steps += 1
        result = self.inner.step(turn_text, finish_reason)
        ends = result.done or self.steps >= self.env.max_turns
        if ends and callable(getattr(self.foreign, "get_reward", None)):
            result.info.update(reward_info(run_to_completion(self.foreign.get_reward()), f"{describe(self.env.cls)}.get_reward"))
        return result


def matches(obj: Any) -> bool:
    return inspect.isclass(obj) and callable(getattr(obj, "reset", None)) and not hasattr(obj, "step") and bool(tool_names(obj))


def missing(obj: Any) -> list[str]:
    lacks = lacking(obj, ("reset",))
    if not inspect.isclass(obj) or not tool_names(obj):
        lacks.append("public tool method")
    return lacks


def check(obj: Any, cfg: Config) -> None:
    check_call(obj, (), cfg.env.params, f"{cfg.env.type}, built as cls(**env.params),", CONTRACT)
    tool_registry(obj.__new__(obj), tool_names(obj), cfg.env.tool_timeout_s)


def build(obj: Any, cfg: Config, tokenizer: PreTrainedTokenizerBase) -> TRLToolEnv:
    try:
        return TRLToolEnv(obj, cfg.env.params, tokenizer, cfg)
    except ToolEnvError as err:
        raise AdapterError(str(err)) from None


ADAPTER = EnvAdapter(name="TRL environment", matches=matches, build=build, check=check, contract=CONTRACT, missing=missing)
