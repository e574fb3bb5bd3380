"""The model's sampled text <-> OpenAI `tool_calls`, in the format the model writes calls in.

Reading: the text of a completion is parsed with the project's call parsers
(`reinforge.envs.tools.calls.PARSERS`, `env.tool_format`: "compact" `<<calculator: 2+2>>` or
"hermes" `<tool_call>{...}</tool_call>`). Each call becomes an OpenAI tool call with an id the
gateway makes up and its arguments as a JSON string; `content` is the text with the call markup
removed (None when that is empty and there are calls), and `finish_reason` is "tool_calls".
The compact format binds plain text (`<<calculator: 2+2>>`) to a tool's single parameter, which
needs the tools' schemas: `RequestTools` is a registry view built from the request's `tools`
JSON, without any function behind it (the agent runs its tools itself). A malformed call is not
an error of the request: the text comes back as content with no tool_calls, and it is counted.

Writing (for templates): an assistant message the agent sends back with `tool_calls` is given to
the chat template as Hugging Face expects it (arguments as an object). A template that does not
render `tool_calls` at all (the tiny model's, the project's fallback) would drop the calls, so
for those the calls are written back into the content in the model's own format.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from reinforge.envs.tools.calls import PARSERS, ToolCall, format_call
from reinforge.gateway.wire import FunctionCall, Message, ToolCallOut, ToolSpec


@dataclass(frozen=True)
class SchemaTool:
    """The part of `reinforge.envs.tools.registry.Tool` the call parsers read: name and schema."""

    name: str
    parameters: dict

    @property
    def required(self) -> list[str]:
        return list(self.parameters.get("required", []) or [])

    @property
    def properties(self) -> dict[str, dict]:
        return dict(self.parameters.get("properties", {}) or {})


class RequestTools:
    """A ToolRegistry-like view of a request's `tools` (schemas only, no callables)."""

    def __init__(self, tools: list[ToolSpec] | None):
        self._tools = {t.function.name: SchemaTool(t.function.name, t.function.parameters or {}) for t in tools or []}

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._tools

    def get(self, name: str) -> SchemaTool:
        return self._tools[name]

    def known(self) -> str:
        return ", ".join(sorted(self._tools)) or "(none)"

    def __len__(self) -> int:
        return len(self._tools)


def template_tools(tools: list[ToolSpec] | None) -> list[dict] | None:
    """The request's tools as `apply_chat_template(tools=...)` takes them (None when there are none)."""
    if not tools:
        return None
    return [{"type": "function", "function": t.function.model_dump(exclude_none=True)} for t in tools]


@dataclass
class ParsedCompletion:
    content: str | None
    tool_calls: list[ToolCallOut] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)  # parser errors; then tool_calls is empty

    @property
    def finish_reason_override(self) -> str | None:
        return "tool_calls" if self.tool_calls else None


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def parse_completion(text: str, style: str, tools: RequestTools, parse_calls: bool = True) -> ParsedCompletion:
    """`text` (the sampled turn, decoded) as an assistant message.

    No calls are looked for when `parse_calls` is false (tool_choice "none") or the request has no tools.
    """
    if not parse_calls or not len(tools):
        return ParsedCompletion(content=text)
    parsed = PARSERS[style](text, tools)
    if parsed.errors:
        return ParsedCompletion(content=text, malformed=list(parsed.errors))
    if not parsed.calls:
        return ParsedCompletion(content=text)
    calls = [ToolCallOut(id=new_call_id(), function=FunctionCall(
        name=c.name, arguments=json.dumps(c.arguments, ensure_ascii=False))) for c in parsed.calls]
    return ParsedCompletion(content=parsed.text or None, tool_calls=calls)


def _arguments(raw: str) -> Any:
    try:
        return json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError:
        return raw  # kept as sent; it then only equals itself


def template_renders_tool_calls(template: str) -> bool:
    return "tool_calls" in template


def template_message(message: Message, style: str, tools: RequestTools, inline_calls: bool) -> dict:
    """One request message as the chat template takes it: role, content as a string, tool calls with
    their arguments as objects, tool_call_id / name where given. `developer` is rendered as `system`."""
    out: dict[str, Any] = {"role": "system" if message.role == "developer" else message.role, "content": message.text()}
    if message.tool_calls:
        calls = [{"type": "function", "function": {"name": c.function.name, "arguments": _arguments(c.function.arguments)}}
                 for c in message.tool_calls]
        out["tool_calls"] = calls
        if inline_calls:
            written = []
            for c in calls:
                args = c["function"]["arguments"]
                call = ToolCall(name=c["function"]["name"], arguments=args if isinstance(args, dict) else {})
                try:
                    written.append(format_call(call, style, tools))
                except ValueError:  # a name the compact format cannot write: the JSON form
                    written.append(json.dumps(c["function"], ensure_ascii=False))
            out["content"] = "".join(filter(None, [out["content"], *written]))
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out
