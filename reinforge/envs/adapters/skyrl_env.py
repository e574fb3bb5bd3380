"""SkyRL-Gym text envs (the `BaseTextEnv` shape), named by import path in `env.type`.

The contract: a class, built once per episode as `cls(env_config, extras)` (SkyRL's own
signature), with

    init(prompt: list[message]) -> (prompt_messages, metadata)
    step(action: str) -> {"observations": [message, ...], "reward": float, "done": bool, "metadata": dict}

- `env_config` is `env.params` (a dict that also reads as attributes, as SkyRL's DictConfig
  does: `env_config.db_path`); `extras` is the task as SkyRL's dataset rows carry it:
  {"reward_spec": {"method": "rule", "ground_truth": task.answer}, "max_turns": env.max_turns,
  "task_id": task.id, **task.metadata} (a task's own metadata keys win).
- `init` gets the task's prompt as chat messages and returns the prompt messages the episode
  starts with (rendered with the chat template, tokenized once).
- `step` gets the policy's turn as decoded text; its `observations` (chat messages) are appended
  as the env's reply, tokenized once; `reward` is reported as `info["env_reward"]`, summed over
  the episode (SkyRL envs mostly reward only the last step): use it with
  `reward.components: [{name: env, fn: env_reward}]`. `done` ends the episode; `env.max_turns`
  caps it too. `close()` is called when the episode ends by the env or at `env.max_turns`.
- `postprocessed_action` is not applied: the policy's sampled tokens are kept exactly as sampled
  (tokens in, tokens out); an env that cuts actions at a marker should end the turn on it instead.
"""

from __future__ import annotations

import inspect
from typing import Any

from transformers import PreTrainedTokenizerBase

from reinforge.config import Config
from reinforge.envs.adapters.base import AdapterError, EnvAdapter, close_foreign, lacking
from reinforge.envs.adapters.chat_text import ChatTextEnv, as_messages, reward_info
from reinforge.envs.base import StepResult
from reinforge.envs.single_turn import chat_messages
from reinforge.import_paths import check_call, describe
from reinforge.tasks.task import Task

CONTRACT = (
    "a SkyRL text env is a class built as cls(env_config, extras) with init(prompt) -> (prompt_messages, metadata) and "
    "step(action: str) -> {'observations': [messages], 'reward': float, 'done': bool, 'metadata': dict}"
)


class AttrDict(dict):
    """A dict whose keys also read as attributes (what SkyRL envs expect of `env_config`)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"env_config has no {name!r} (set it in env.params)") from None


def extras(task: Task, max_turns: int) -> dict[str, Any]:
    return {"reward_spec": {"method": "rule", "ground_truth": task.answer}, "max_turns": max_turns, "task_id": task.id, **task.metadata}


class SkyRLTextEnv(ChatTextEnv):
    def __init__(self, cls: type, params: dict, tokenizer: PreTrainedTokenizerBase, max_turns: int, max_observation_tokens: int):
        super().__init__(tokenizer, max_turns, max_observation_tokens)
        self.cls, self.params = cls, dict(params)

    def episode(self) -> "SkyRLEpisode":
        return SkyRLEpisode(self)


class SkyRLEpisode:
    def __init__(self, env: SkyRLTextEnv):
        self.env = env
        self.foreign: Any = None
        self.steps = 0

    def reset(self, task: Task) -> list[int]:
        name = describe(self.env.cls)
        self.foreign = self.env.cls(AttrDict(self.env.params), extras(task, self.env.max_turns))
        out = self.foreign.init(chat_messages(task))
        if not (isinstance(out, tuple) and len(out) == 2):
            raise AdapterError(f"{name}.init returned {out!r}; a SkyRL init returns (prompt_messages, metadata)")
        messages = as_messages(out[0], what=f"{name}.init prompt")
        if not messages:
            raise AdapterError(f"{name}.init returned no prompt messages")
        return self.env.chat.prompt_ids(messages)

    def step(self, turn_text: str, finish_reason: str) -> StepResult:
        name = describe(self.env.cls)
        self.steps += 1
        out = self.foreign.step(turn_text)
        if not isinstance(out, dict) or not {"observations", "reward", "done"} <= set(out):
            raise AdapterError(f"{name}.step returned {out!r}; a SkyRL step returns a dict with observations, reward, done, metadata")
        info = reward_info(out["reward"], f"{name}.step")
        if out["done"] or self.steps >= self.env.max_turns:
            close_foreign(self.foreign)
        if out["done"]:
            info["finish_reason"] = finish_reason
            return StepResult(done=True, info=info)
        messages = as_messages(out["observations"], what=f"{name}.step observations")
        if not messages:
            raise AdapterError(f"{name}.step returned no observations but done is false")
        ids, text = self.env.observation(messages)
        return StepResult(observation_ids=ids, info=info, observation_text=text)


def matches(obj: Any) -> bool:
    return inspect.isclass(obj) and not lacking(obj, ("init", "step"))


def check(obj: Any, cfg: Config) -> None:
    check_call(obj, ({}, {}), {}, f"{cfg.env.type}, built as cls(env_config, extras),", CONTRACT)
    check_call(getattr(obj, "init"), (None, []), {}, f"{cfg.env.type}.init, called as init(prompt),", CONTRACT)
    check_call(getattr(obj, "step"), (None, ""), {}, f"{cfg.env.type}.step, called as step(action),", CONTRACT)


def build(obj: Any, cfg: Config, tokenizer: PreTrainedTokenizerBase) -> SkyRLTextEnv:
    return SkyRLTextEnv(obj, cfg.env.params, tokenizer, cfg.env.max_turns, cfg.env.max_observation_tokens)


ADAPTER = EnvAdapter(
    name="SkyRL text env",
    matches=matches,
    build=build,
    check=check,
    contract=CONTRACT,
    missing=lambda obj: lacking(obj, ("init", "step")),
)
