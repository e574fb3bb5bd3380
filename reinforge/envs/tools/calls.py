"""Read tool calls out of one assistant turn, and write them (for supervised demonstrations).

Two formats:
- hermes (Hermes / Qwen chat templates):
  `<tool_call>{"name": "calculator", "arguments": {"expression": "2+2"}}</tool_call>`, any number
  per turn. `arguments` may also be a JSON string holding an object, as some models emit.
- compact, for tiny models that cannot afford JSON: `<<calculator: 2+2>>`. Text starting with `{`
  is a JSON object of arguments; any other text is bound to the tool's one parameter, so this
  parser needs the registry. The call ends at the first `>>`, so plain text cannot hold one
  (`format_call` then writes the JSON form, where `>` is escaped).

Parsers never raise on model text: everything wrong with a call becomes a short message in
`ParsedTurn.errors` that the environment can show the model. A call to a tool that does not
exist is *not* a parse error (the call is well-formed); `call_tool` reports it. The one exception
is compact plain text, which can only be bound to a parameter of a tool the registry knows.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from reinforge.envs.tools.registry import Tool, ToolRegistry


@dataclass
class ToolCall:
    name: str
    arguments: dict = field(default_factory=dict)


@dataclass
class ParsedTurn:
    calls: list[ToolCall]
    errors: list[str]
    text: str  # the turn with all call markup removed, stripped


def _json_for_markup(value: Any) -> str:
    # `<` and `>` only occur inside JSON strings, where \u escapes mean the same thing; escaping
    # them keeps a "</tool_call>" or ">>" inside an argument from ending the call early.
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c").replace(">", "\\u003e")


def _short(text: str, limit: int = 80) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _arguments_object(raw: Any) -> tuple[dict | None, str | None]:
    """(arguments, None) or (None, error) for an `arguments` value: an object or a JSON string of one."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as e:
            return None, f"malformed tool call: arguments string is not JSON: {e}"
    if not isinstance(raw, dict):
        return None, f"malformed tool call: arguments must be a JSON object, got {type(raw).__name__}"
    return raw, None


# --- hermes -------------------------------------------------------------------------------------

HERMES_OPEN, HERMES_CLOSE = "<tool_call>", "</tool_call>"


def _hermes_call(body: str) -> tuple[ToolCall | None, str | None]:
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        return None, f"malformed tool call: {e}"
    if not isinstance(data, dict):
        return None, f'malformed tool call: expected {{"name": ..., "arguments": {{...}}}}, got {type(data).__name__}'
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        return None, 'malformed tool call: missing "name" (a non-empty string)'
    arguments, error = _arguments_object(data.get("arguments", {}))
    if error:
        return None, error
    return ToolCall(name=name, arguments=arguments), None


def parse_hermes(text: str, registry: ToolRegistry | None = None) -> ParsedTurn:
    """Every `<tool_call>...</tool_call>` in `text`; the registry is not needed (kept for one signature)."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    kept: list[str] = []
    pos = 0
    while True:
        start = text.find(HERMES_OPEN, pos)
        segment = text[pos:] if start < 0 else text[pos:start]
        if HERMES_CLOSE in segment:
            errors.append(f"{HERMES_CLOSE} without a matching {HERMES_OPEN}")
            segment = segment.replace(HERMES_CLOSE, "")
        kept.append(segment)
        if start < 0:
            break
        body_start = start + len(HERMES_OPEN)
        end = text.find(HERMES_CLOSE, body_start)
        reopened = text.find(HERMES_OPEN, body_start)
        if end < 0 or 0 <= reopened < end:
            stop = len(text) if end < 0 else reopened
            errors.append(f"unclosed {HERMES_OPEN}: {_short(text[body_start:stop])!r} has no {HERMES_CLOSE}")
            if end < 0:
                break
            pos = reopened
            continue
        call, error = _hermes_call(text[body_start:end])
        if call is not None:
            calls.append(call)
        else:
            errors.append(error)
        pos = end + len(HERMES_CLOSE)
    return ParsedTurn(calls=calls, errors=errors, text="".join(kept).strip())


def format_hermes(call: ToolCall, registry: ToolRegistry | None = None) -> str:
    return f"{HERMES_OPEN}\n{_json_for_markup({'name': call.name, 'arguments': call.arguments})}\n{HERMES_CLOSE}"


# --- compact ------------------------------------------------------------------------------------

COMPACT_OPEN, COMPACT_CLOSE = "<<", ">>"
_COMPACT_NAME = re.compile(r"[A-Za-z0-9_-]+")
_COMPACT_HEADER = re.compile(r"\s*(" + _COMPACT_NAME.pattern + r")\s*:")
_SCALAR_TYPES = {"integer": int, "number": (int, float), "boolean": bool}


def _plain_text_parameter(tool: Tool) -> str | None:
    """The parameter that plain-text arguments bind to: the one required one (or the only one)."""
    if len(tool.required) == 1:
        return tool.required[0]
    if not tool.required and len(tool.properties) == 1:
        return next(iter(tool.properties))
    return None


def _bind_plain_text(tool: Tool, parameter: str, value: str) -> Any:
    # `<<square: 12>>` should pass the integer 12 to an integer parameter, as a tiny model means.
    kind = tool.properties.get(parameter, {}).get("type")
    if kind in _SCALAR_TYPES:
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return value
        if isinstance(parsed, _SCALAR_TYPES[kind]) and (kind == "boolean" or not isinstance(parsed, bool)):
            return parsed
    return value


def _compact_call(name: str, argument_text: str, registry: ToolRegistry) -> tuple[ToolCall | None, str | None]:
    argument_text = argument_text.strip()
    if argument_text.startswith("{"):
        try:
            arguments = json.loads(argument_text)
        except json.JSONDecodeError as e:
            return None, f"malformed tool call: {e}"
        return ToolCall(name=name, arguments=arguments), None
    if not argument_text:
        return ToolCall(name=name, arguments={}), None
    if name not in registry:
        # Well-formed, but plain text can only be bound to a parameter of a known tool.
        return None, f"unknown tool {name!r}; known tools: {registry.known()}"
    tool = registry.get(name)
    parameter = _plain_text_parameter(tool)
    if parameter is None and not tool.properties:
        return None, f"tool {name!r} takes no arguments; call it as <<{name}: {{}}>>"
    if parameter is None:
        example = ", ".join(f'"{p}": ...' for p in (tool.required or list(tool.properties)))
        return None, (f"tool {name!r} takes several parameters; write them as a JSON object: "
                      f"<<{name}: {{{example}}}>>")
    return ToolCall(name=name, arguments={parameter: _bind_plain_text(tool, parameter, argument_text)}), None


def parse_compact(text: str, registry: ToolRegistry) -> ParsedTurn:
    """Every `<<name: arguments>>` in `text`; plain-text arguments are bound using `registry`."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    kept: list[str] = []
    pos = 0
    while True:
        start = text.find(COMPACT_OPEN, pos)
        if start < 0:
            kept.append(text[pos:])
            break
        kept.append(text[pos:start])
        header = _COMPACT_HEADER.match(text, start + len(COMPACT_OPEN))
        body_start = header.end() if header else start + len(COMPACT_OPEN)
        end = text.find(COMPACT_CLOSE, body_start)
        if end < 0:
            errors.append(f"unclosed {COMPACT_OPEN}: {_short(text[start:])!r} has no {COMPACT_CLOSE}")
            break
        if header is None:
            errors.append(f"malformed tool call {_short(text[start:end + 2])!r}: expected <<tool_name: arguments>>")
        else:
            call, error = _compact_call(header.group(1), text[body_start:end], registry)
            if call is not None:
                calls.append(call)
            else:
                errors.append(error)
        pos = end + len(COMPACT_CLOSE)
    return ParsedTurn(calls=calls, errors=errors, text="".join(kept).strip())


def format_compact(call: ToolCall, registry: ToolRegistry) -> str:
    """The shortest compact form that parses back to `call`: plain text when it can, else JSON."""
    if not isinstance(call.name, str) or not _COMPACT_NAME.fullmatch(call.name):
        raise ValueError(f"tool name {call.name!r} cannot be written in the compact format")
    if len(call.arguments) == 1 and call.name in registry:
        (value,) = call.arguments.values()
        plain = value if isinstance(value, str) else json.dumps(value)
        candidate = f"{COMPACT_OPEN}{call.name}: {plain}{COMPACT_CLOSE}"
        parsed = parse_compact(candidate, registry)
        if parsed.calls == [call] and not parsed.errors:
            return candidate
    return f"{COMPACT_OPEN}{call.name}: {_json_for_markup(call.arguments)}{COMPACT_CLOSE}"


# --- by style name ------------------------------------------------------------------------------

PARSERS: dict[str, Callable[[str, ToolRegistry], ParsedTurn]] = {"hermes": parse_hermes, "compact": parse_compact}
FORMATTERS: dict[str, Callable[[ToolCall, ToolRegistry], str]] = {"hermes": format_hermes, "compact": format_compact}


def parse(text: str, style: str, registry: ToolRegistry) -> ParsedTurn:
    return _by_style(PARSERS, style)(text, registry)


def format_call(call: ToolCall, style: str, registry: ToolRegistry) -> str:
    """`call` written in `style`; `PARSERS[style](format_call(call, style, r), r).calls == [call]`."""
    return _by_style(FORMATTERS, style)(call, registry)


def _by_style(table: dict, style: str):
    try:
        return table[style]
    except (KeyError, TypeError):
        raise ValueError(f"unknown tool-call style {style!r}; known styles: {', '.join(sorted(table))}") from None
