"""The tool environment: multi-turn episodes where the policy calls tools, reads results, answers.

Each policy turn is parsed for tool calls (hermes or compact syntax). A turn with calls gets
their results back as tool messages (malformed calls and failing tools as error messages the
model reads, counted in the episode's stats); a turn without a call is the answer and ends the
episode. The final turn's text is what the task's verifier checks.

Per episode the env counts `tool_calls` (calls attempted, malformed ones included),
`valid_calls` (parsed, known tool, ran without error), `tool_errors`, and `void_turns`: turns
with neither a tool call nor an answer (empty, or cut by the token limit before any call) as in
SimpleTIR (Xue et al. 2025, arXiv:2509.02479), which `algo.drop_void_turns` filters out.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from transformers import PreTrainedTokenizerBase

from reinforge.envs.base import StepResult
from reinforge.envs.chat_format import ChatFormat
from reinforge.envs.single_turn import chat_messages
from reinforge.envs.tools.calls import PARSERS, ToolCall, format_call
from reinforge.envs.tools.execution import call_tool
from reinforge.envs.tools.registry import ToolRegistry
from reinforge.tasks.task import Task



class ToolEnvError(ValueError):
    pass


def assistant_text(message: dict, tool_format: str, registry: ToolRegistry) -> str:
    """An assistant message as the policy writes it: its content, then its tool calls in
    `tool_format` (so one demonstration serves the compact and the hermes format)."""
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", call)
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        calls.append(format_call(ToolCall(function["name"], arguments), tool_format, registry))
    return "".join([str(message.get("content") or ""), *calls])


def demonstration_turns(task: Task, write: Callable[[dict], str]) -> list[str]:
    """The text of each assistant turn that warm-up teaches (`write` renders a message, calls in
    the env's syntax); each turn is closed by one end-of-turn token."""
    demo = task.sft_target
    return [demo] if isinstance(demo, str) else [write(m) for m in demo if m.get("role") == "assistant"]


class ToolEnv:
    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        registry: ToolRegistry,
        tool_format: str = "compact",
        max_turns: int = 4,
        max_observation_tokens: int = 64,
        tool_timeout_s: float | None = None,
        valid_call_reward: float = 0.0,
    ):
        if tool_format not in PARSERS:
            raise ToolEnvError(f"unknown tool format {tool_format!r}; valid: {', '.join(PARSERS)}")
        self.tokenizer = tokenizer
        self.registry = registry
        self.tool_format = tool_format
        self.parse = PARSERS[tool_format]
        self.max_turns = max_turns
        self.max_observation_tokens = max_observation_tokens
        self.tool_timeout_s = tool_timeout_s
        self.valid_call_reward = valid_call_reward
        self.chat = ChatFormat(tokenizer, tools=registry.schemas() or None)
        self.stop_token_ids = tuple(dict.fromkeys([self.chat.end_of_turn_id, tokenizer.eos_token_id]))

    def prompt_ids(self, task: Task) -> list[int]:
        return self.chat.prompt_ids(chat_messages(task))

    def decode_response(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def episode(self) -> "ToolEpisode":
        return ToolEpisode(self)

    def clip_observation(self, content: str) -> str:
        return self.chat.clip(content, self.max_observation_tokens)

    def assistant_text(self, message: dict) -> str:
        return assistant_text(message, self.tool_format, self.registry)

    def demonstration_turns(self, task: Task) -> list[str]:
        return demonstration_turns(task, self.assistant_text)

    def sft_example(self, task: Task) -> tuple[list[int], list[bool]]:
        """The prompt, then the demonstration's messages: assistant turns trained (each closed by
        the end-of-turn token), tool messages in between as the observations the env would append."""
        demo = task.sft_target
        messages = [{"role": "assistant", "content": demo}] if isinstance(demo, str) else list(demo)
        if not messages or messages[-1].get("role") != "assistant":
            raise ToolEnvError(f"task {task.id}: a demonstration must end with an assistant message")
        def observation(replies: list[dict]) -> list[int]:
            return self.chat.observation_ids(
                [{"role": m["role"], "content": self.clip_observation(str(m["content"]))} for m in replies]
            )

        return self.chat.demonstration_ids(self.prompt_ids(task), messages, self.assistant_text, observation)


class ToolEpisode:
    """One episode's state: the task, and whether it has ended."""

    def __init__(self, env: ToolEnv):
        self.env = env
        self.task: Task | None = None

    def reset(self, task: Task) -> list[int]:
        self.task = task
        return self.env.prompt_ids(task)

    def step(self, turn_text: str, finish_reason: str) -> StepResult:
        env = self.env
        parsed = env.parse(turn_text, env.registry)
        if not parsed.calls and not parsed.errors:
            void = not turn_text.strip() or finish_reason == "length"
            return StepResult(done=True, info={"finish_reason": finish_reason, "void_turns": int(void)})

        contents, valid = [], 0
        for call in parsed.calls:
            result = call_tool(env.registry, call, timeout_s=env.tool_timeout_s)
            valid += result.ok
            contents.append(result.content if result.ok else f"error: {result.error or result.content}")
        contents += [f"error: {message}" for message in parsed.errors]
        messages = [{"role": "tool", "content": env.clip_observation(c)} for c in contents]
        attempted = len(parsed.calls) + len(parsed.errors)
        return StepResult(
            observation_ids=env.chat.observation_ids(messages),
            reward=env.valid_call_reward * valid if env.valid_call_reward else None,
            done=False,
            info={"tool_calls": attempted, "valid_calls": valid, "tool_errors": attempted - valid},
            observation_text="\n".join(m["content"] for m in messages),
            observation_role="tool",
        )
