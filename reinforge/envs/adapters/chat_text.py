"""The reinforge side of an adapter whose foreign env speaks chat text, shared by the adapters.

`ChatTextEnv` holds the tokenizer, the chat format and the limits, and implements the Env
protocol's token work once: the prompt is rendered with the chat template and tokenized once, each
observation (the env's reply messages) is tokenized once as the template writes it between two
assistant turns (`ChatFormat.observation_ids`), the policy's sampled tokens are never re-tokenized
(the rollout loop keeps them), and warm-up demonstrations are laid out the same way. An adapter
supplies only `episode()`: how its foreign env is reset and stepped.

The env's reward reaches the trajectory through `StepResult.info["env_reward"]` (summed over the
episode's steps by the rollout loop, into `trajectory.stats`), where the built-in `env_reward`
reward component reads it: the adapters give no per-turn process reward of their own.
"""

from __future__ import annotations

import json
import numbers
from abc import ABC, abstractmethod
from typing import Any

from transformers import PreTrainedTokenizerBase

from reinforge.envs.adapters.base import AdapterError
from reinforge.envs.base import ENV_REWARD
from reinforge.envs.chat_format import ChatFormat
from reinforge.tasks.task import Task


def as_messages(observation: Any, role: str = "user", what: str = "observation") -> list[dict]:
    """A foreign env's observation as chat messages: a string is one `role` message, a dict one
    message, a list of dicts (or of pydantic messages) the messages; None or "" no message."""
    if observation is None or observation == "":
        return []
    if isinstance(observation, str):
        return [{"role": role, "content": observation}]
    items = [observation] if isinstance(observation, dict) else observation
    if not isinstance(items, (list, tuple)):
        raise AdapterError(f"the {what} is a {type(observation).__name__}; it must be a string, a message dict or a list of them")
    messages = []
    for item in items:
        if hasattr(item, "model_dump"):  # pydantic message models (verifiers)
            item = item.model_dump(exclude_none=True)
        if not isinstance(item, dict) or "role" not in item:
            raise AdapterError(f"the {what} holds {item!r}; a message is a dict with 'role' and 'content'")
        messages.append({"role": item["role"], "content": str(item.get("content") or "")})
    return messages


def reward_value(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise AdapterError(f"{what} returned the reward {value!r}; a reward is a number")
    return float(value)


def reward_info(value: Any, what: str) -> dict[str, float]:
    return {ENV_REWARD: reward_value(value, what)}


class ChatTextEnv(ABC):
    """Env protocol for chat-text adapters; subclasses implement `episode()`."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_turns: int, max_observation_tokens: int, tools: list[dict] | None = None):
        self.tokenizer = tokenizer
        self.max_turns = max_turns
        self.max_observation_tokens = max_observation_tokens
        self.chat = ChatFormat(tokenizer, tools=tools)
        self.stop_token_ids = tuple(dict.fromkeys([self.chat.end_of_turn_id, tokenizer.eos_token_id]))

    @abstractmethod
    def episode(self):
        """A fresh episode around a fresh instance of the foreign env."""

    def prompt_ids(self, task: Task) -> list[int]:
        """The prompt an episode of `task` starts with (a fresh foreign env is reset for it)."""
        return self.episode().reset(task)

    def decode_response(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def clip(self, content: str) -> str:
        return self.chat.clip(content, self.max_observation_tokens)

    def observation(self, messages: list[dict]) -> tuple[list[int], str]:
        """(token ids, text for the transcript) of the env's reply, each message clipped."""
        clipped = [{"role": m["role"], "content": self.clip(m["content"])} for m in messages]
        return self.chat.observation_ids(clipped), "\n".join(m["content"] for m in clipped)

    def assistant_text(self, message: dict) -> str:
        return str(message.get("content") or "")

    def demonstration_messages(self, task: Task) -> list[dict]:
        demo = task.sft_target
        messages = [{"role": "assistant", "content": demo}] if isinstance(demo, str) else list(demo)
        if not messages or messages[-1].get("role") != "assistant":
            raise AdapterError(f"task {task.id}: a demonstration must end with an assistant message")
        return messages

    def demonstration_turns(self, task: Task) -> list[str]:
        return [self.assistant_text(m) for m in self.demonstration_messages(task) if m.get("role") == "assistant"]

    def sft_example(self, task: Task) -> tuple[list[int], list[bool]]:
        """The prompt (as the env's reset writes it), then the demonstration: assistant turns
        trained, each closed by the end-of-turn token; the messages between them (the env's
        replies, in HF chat format) appended as the observations the env would give."""
        def observation(replies: list[dict]) -> list[int]:
            as_text = [
                {"role": m["role"], "content": m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content"))}
                for m in replies
            ]
            return self.observation(as_text)[0]

        return self.chat.demonstration_ids(self.prompt_ids(task), self.demonstration_messages(task), self.assistant_text, observation)
