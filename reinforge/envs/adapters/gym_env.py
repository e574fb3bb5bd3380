"""Gym-style text envs (the gymnasium / GEM convention), named by import path in `env.type`.

The contract: a class, built once per episode as `cls(**env.params)`, with

    reset(...) -> (observation, info)
    step(action: str) -> (observation, reward, terminated, truncated, info)

- `reset` is called with those of `task`, `seed`, `options` that its signature names (all three
  when it takes **kwargs): `task` the reinforge Task; `seed` the task's seed (adapters.seeds: the
  same for every episode of a GRPO group); `options` a plain dict {"task_id", "prompt", "answer",
  and the task's metadata}. A reset that takes no seed runs with the global `random` and
  `numpy.random` seeded from the task (and restored after). Its observation is the prompt (a
  string becomes a user message; a message dict or a list of them is taken as is); an empty one
  means: the task's own prompt.
- `step` gets the policy's turn as decoded text. Its observation (same forms) is appended as the
  env's reply, tokenized once; `reward` (a number) is reported as `info["env_reward"]`, summed
  over the episode: use it with `reward.components: [{name: env, fn: env_reward}]`.
  `terminated` ends the episode (finish reason: the engine's, stop or length); `truncated` ends it
  as the env's own turn limit (finish reason max_turns). `env.max_turns` caps the episode too;
  `close()`, when the env has one, is called when the episode ends by the env or at `env.max_turns`.
  A step that returns no observation but does not end the episode is an error of the env.

The policy's sampled tokens are never re-tokenized; the env sees text, the trainer keeps tokens.
"""

from __future__ import annotations

import inspect
from typing import Any

from transformers import PreTrainedTokenizerBase

from reinforge.config import Config
from reinforge.envs.adapters.base import AdapterError, EnvAdapter, close_foreign, lacking
from reinforge.envs.adapters.chat_text import ChatTextEnv, as_messages, reward_info
from reinforge.envs.adapters.seeds import seeded_global_rngs, task_seed
from reinforge.envs.base import StepResult
from reinforge.envs.single_turn import chat_messages
from reinforge.import_paths import check_call, describe
from reinforge.tasks.task import Task

CONTRACT = (
    "a gym-style text env is a class built as cls(**env.params) with reset(seed=None, options=None) -> (observation, info) "
    "and step(action: str) -> (observation, reward, terminated, truncated, info)"
)
RESET_ARGUMENTS = ("task", "seed", "options")


def reset_kwargs(reset: Any, task: Task) -> dict[str, Any]:
    """The keyword arguments `reset` takes, of task / seed / options."""
    parameters = inspect.signature(reset).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    given = {
        "task": task,
        "seed": task_seed(task),
        "options": {"task_id": task.id, "prompt": task.prompt, "answer": task.answer, **task.metadata},
    }
    return {k: v for k, v in given.items() if takes_any or k in parameters}


def call_reset(env: Any, task: Task) -> tuple[Any, dict]:
    kwargs = reset_kwargs(env.reset, task)
    if "seed" in kwargs:
        out = env.reset(**kwargs)
    else:
        with seeded_global_rngs(task_seed(task)):
            out = env.reset(**kwargs)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise AdapterError(f"{describe(type(env))}.reset returned {out!r}; a gym-style reset returns (observation, info)")
    return out


class GymTextEnv(ChatTextEnv):
    def __init__(self, cls: type, params: dict, tokenizer: PreTrainedTokenizerBase, max_turns: int, max_observation_tokens: int):
        super().__init__(tokenizer, max_turns, max_observation_tokens)
        self.cls, self.params = cls, dict(params)

    def episode(self) -> "GymEpisode":
        return GymEpisode(self)


class GymEpisode:
    """One episode: its own instance of the user's env."""

    def __init__(self, env: GymTextEnv):
        self.env = env
        self.foreign: Any = None
        self.steps = 0

    def reset(self, task: Task) -> list[int]:
        self.foreign = self.env.cls(**self.env.params)
        observation, _ = call_reset(self.foreign, task)
        messages = as_messages(observation, what=f"{describe(self.env.cls)}.reset observation") or chat_messages(task)
        return self.env.chat.prompt_ids(messages)

    def step(self, turn_text: str, finish_reason: str) -> StepResult:
        name = describe(self.env.cls)
        self.steps += 1
        out = self.foreign.step(turn_text)
        if not (isinstance(out, tuple) and len(out) == 5):
            raise AdapterError(f"{name}.step returned {out!r}; a gym-style step returns (observation, reward, terminated, truncated, info)")
        observation, reward, terminated, truncated, _ = out
        info = reward_info(reward, f"{name}.step")
        if terminated or truncated or self.steps >= self.env.max_turns:
            close_foreign(self.foreign)
        if terminated or truncated:
            info["finish_reason"] = finish_reason if terminated else "max_turns"
            return StepResult(done=True, info=info)
        messages = as_messages(observation, what=f"{name}.step observation")
        if not messages:
            raise AdapterError(f"{name}.step returned no observation but did not end the episode (terminated and truncated are false)")
        ids, text = self.env.observation(messages)
        return StepResult(observation_ids=ids, info=info, observation_text=text)


def matches(obj: Any) -> bool:
    return inspect.isclass(obj) and not lacking(obj, ("reset", "step"))


def check(obj: Any, cfg: Config) -> None:
    check_call(obj, (), cfg.env.params, f"{cfg.env.type}, built as cls(**env.params),", CONTRACT)
    check_call(getattr(obj, "step"), (None, ""), {}, f"{cfg.env.type}.step, called as step(action),", CONTRACT)


def build(obj: Any, cfg: Config, tokenizer: PreTrainedTokenizerBase) -> GymTextEnv:
    return GymTextEnv(obj, cfg.env.params, tokenizer, cfg.env.max_turns, cfg.env.max_observation_tokens)


ADAPTER = EnvAdapter(
    name="gym-style text env",
    matches=matches,
    build=build,
    check=check,
    contract=CONTRACT,
    missing=lambda obj: lacking(obj, ("reset", "step")),
)
