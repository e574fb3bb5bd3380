"""One task record's fields, checked and normalised: shared by the file-based task sources.

The JSONL source and the `hf_dataset` source read the same things (a prompt, a reference answer,
an id, a warm-up demonstration, a whole chat conversation) from different containers, so both
parse them here and say what is wrong the same way: `where` names the file and line or row,
`label` the field or column. Every problem is a ConfigError, raised before any model is loaded.

Chat messages follow the Hugging Face format that `Task.demonstration` documents: an assistant
message may carry `tool_calls` ([{"type": "function", "function": {"name", "arguments"}}], the
arguments an object or a JSON string of one) and tool results are role "tool" messages.
Columnar formats (Parquet, Arrow) store a list of messages as one struct type whose fields are
the union of every row's keys, so a field a message never had comes back as null: null fields of
messages (and of tool-call arguments) are dropped here, which is why a null argument value cannot
be expressed there (write the arguments as a JSON string to keep one).
"""

from __future__ import annotations

import json
from typing import Any

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks.verifiers import UnknownVerifierError, get_verifier, parse_number
from reinforge.tasks.task import Prompt, Task, TaskSplits, drop_held_out_prompts, hold_out

# Roles a demonstration may hold after the prompt: the policy's turns and what answers them.
DEMONSTRATION_ROLES = ("assistant", "tool", "user")
PROMPT_ROLES = ("system", "user")


def fail(where: str, message: str) -> ConfigError:
    return ConfigError(f"{where}: {message}")


def drop_nulls(message: Any) -> Any:
    """A message without the null fields a columnar format gives it (see the module docstring)."""
    if not isinstance(message, dict):
        return message
    cleaned = {k: v for k, v in message.items() if v is not None}
    calls = cleaned.get("tool_calls")
    if isinstance(calls, list):
        cleaned["tool_calls"] = [_call_without_nulls(c) for c in calls]
    return cleaned


def _call_without_nulls(call: Any) -> Any:
    if not isinstance(call, dict):
        return call
    call = {k: v for k, v in call.items() if v is not None}
    function = call.get("function")
    if isinstance(function, dict):
        function = {k: v for k, v in function.items() if v is not None}
        if isinstance(function.get("arguments"), dict):
            function["arguments"] = {k: v for k, v in function["arguments"].items() if v is not None}
        call["function"] = function
    return call


def parse_prompt(value: Any, where: str, label: str = "'prompt'") -> Prompt:
    """Text, or a non-empty list of {"role": str, "content": str} messages."""
    if value is None:
        raise fail(where, f"{label} is null; every task needs a prompt")
    if isinstance(value, str):
        if not value.strip():
            raise fail(where, f"{label} is empty")
        return value
    if isinstance(value, list) and value:
        messages = [drop_nulls(m) for m in value]
        for i, message in enumerate(messages):
            if (
                not isinstance(message, dict)
                or not {"role", "content"} <= set(message)
                or not all(isinstance(v, str) for v in message.values())
            ):
                raise fail(where, f"{label} message {i} must be {{\"role\": str, \"content\": str}}, got {message!r}")
        return messages
    raise fail(where, f"{label} must be a string or a non-empty list of chat messages, got {value!r}")


def parse_answer(value: Any, where: str, label: str = "'answer'") -> str:
    """A string, or a number or boolean written as JSON writes it (`true`, not Python's `True`)."""
    if value is None:
        raise fail(where, f"{label} is null; every task needs a reference answer")
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise fail(where, f"{label} must be a string, number or boolean, got {value!r}")


def parse_id(value: Any, where: str, label: str = "'id'") -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise fail(where, f"{label} must be a string or integer, got {value!r}")
    return str(value)


def check_verifier(verifier: Any, answer: str, where: str) -> str:
    """`verifier` if it is registered and can read `answer` as a reference."""
    try:
        get_verifier(verifier)  # a built-in name or the user's own by import path
    except UnknownVerifierError as err:
        raise fail(where, str(err)) from None
    if verifier == "numeric" and parse_number(answer) is None:
        raise fail(where, f"'answer' {answer!r} is not a number but verifier is 'numeric'")
    return verifier


def parse_demonstration(value: Any, where: str, label: str = "'solution'", first_index: int = 0) -> str | list[dict] | None:
    """A warm-up target: text, or the chat messages that follow the prompt (assistant turns with
    optional tool calls, tool results and user replies between them, the last one an assistant
    turn). A single plain assistant message is its text, so single-turn envs can take it too.
    Messages are numbered from `first_index` in errors (their place in a whole conversation)."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise fail(where, f"{label} must be a string or a non-empty list of chat messages, got {value!r}")
    messages = [drop_nulls(m) for m in value]
    for i, message in enumerate(messages):
        _check_demonstration_message(message, where, f"{label} message {first_index + i}")
    if messages[-1]["role"] != "assistant":
        raise fail(where, f"{label} must end with an assistant message (the final answer), ends with role {messages[-1]['role']!r}")
    if len(messages) == 1 and not messages[0].get("tool_calls"):
        return messages[0].get("content") or ""
    return messages


def _check_demonstration_message(message: Any, where: str, label: str) -> None:
    if not isinstance(message, dict) or message.get("role") not in DEMONSTRATION_ROLES:
        raise fail(where, f"{label} must be a message with role {' | '.join(DEMONSTRATION_ROLES)}, got {message!r}")
    content = message.get("content")
    if message["role"] != "assistant" or content is not None:
        if not isinstance(content, str):
            raise fail(where, f"{label} ({message['role']}) needs a string 'content', got {content!r}")
    calls = message.get("tool_calls")
    if calls is None:
        return
    if message["role"] != "assistant" or not isinstance(calls, list):
        raise fail(where, f"{label}: 'tool_calls' must be a list, on an assistant message")
    for j, call in enumerate(calls):
        _check_tool_call(call, where, f"{label} tool call {j}")


def _check_tool_call(call: Any, where: str, label: str) -> None:
    function = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        shape = '{"type": "function", "function": {"name": str, "arguments": {...}}}'
        raise fail(where, f"{label} must be {shape}, got {call!r}")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as err:
            raise fail(where, f"{label} ({function['name']}): arguments string is not JSON: {err.msg}") from None
    if not isinstance(arguments, dict):
        raise fail(where, f"{label} ({function['name']}): arguments must be an object, got {arguments!r}")


def split_conversation(value: Any, where: str, label: str) -> tuple[list[dict], str | list[dict]]:
    """A whole conversation as (prompt, demonstration): the leading system and user messages are
    the prompt, everything from the first assistant message on is the demonstration."""
    if not isinstance(value, list) or not value:
        raise fail(where, f"{label} must be a non-empty list of chat messages, got {value!r}")
    messages = [drop_nulls(m) for m in value]
    first_reply = next((i for i, m in enumerate(messages) if not isinstance(m, dict) or m.get("role") not in PROMPT_ROLES), len(messages))
    if first_reply == 0:
        raise fail(where, f"{label} must start with the prompt (system / user messages), starts with {messages[0]!r}")
    if first_reply == len(messages):
        raise fail(where, f"{label} has no assistant message after the prompt: nothing to demonstrate")
    prompt = parse_prompt(messages[:first_reply], where, label)
    demonstration = parse_demonstration(messages[first_reply:], where, label, first_index=first_reply)
    assert isinstance(prompt, list) and demonstration is not None
    return prompt, demonstration


def final_answer_text(demonstration: str | list[dict]) -> str:
    """The text of a demonstration's last assistant turn (a conversation's answer)."""
    return demonstration if isinstance(demonstration, str) else str(demonstration[-1].get("content") or "")


def hold_out_tasks(train: list[Task], held_out: list[Task] | None, cfg: TaskConfig, seed: int) -> TaskSplits:
    """Train and held-out tasks from a training set and an optional held-out one.

    With `held_out`, those tasks are the evaluation set (their ids must not repeat training ids).
    Without it, `task.eval_size` tasks (at most half) are drawn with the seed (`task.hold_out`).
    Either way, training tasks whose prompt is also held out are dropped (`drop_held_out_prompts`),
    so evaluation never measures memorisation.
    """
    if held_out is not None:
        ids = {t.id for t in train}
        clash = next((t.id for t in held_out if t.id in ids), None)
        if clash is not None:
            raise ConfigError(f"task id {clash!r} is in both {cfg.path} and {cfg.eval_path or 'its eval split'}; ids must be unique")
    else:
        train, held_out = hold_out(train, cfg.eval_size, seed)
    train = drop_held_out_prompts(train, held_out)
    if not train:
        raise ConfigError(f"task.path {cfg.path}: every training prompt also appears in the held-out tasks")
    return TaskSplits(train=train, eval=held_out)
