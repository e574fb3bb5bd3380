"""Run one parsed tool call and turn whatever happens into a `ToolResult` the model can read.

Nothing a model can write makes `call_tool` raise: an unknown tool, arguments that do not match
the schema, a tool that raises and a tool that hangs all come back as `ok=False` results, so one
bad call is recorded on its trajectory instead of killing the run (DESIGN.md invariant 2).

Tools run in a worker thread under a timeout. Python threads cannot be killed, so a hung tool's
thread is abandoned (a daemon thread, which never blocks interpreter exit) and keeps whatever it
holds until it returns. That is acceptable for trusted tool code that is merely slow; code the
model wrote is never run this way but goes through the subprocess sandbox (`sandbox.py`), which
*can* be killed.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import jsonschema

from reinforge.envs.tools.calls import ToolCall
from reinforge.envs.tools.registry import Tool, ToolRegistry


@dataclass
class ToolResult:
    content: str  # what the model is shown: the tool's output, or "error: ..." when it failed
    ok: bool
    error: str | None = None


def _failure(message: str) -> ToolResult:
    return ToolResult(content=f"error: {message}", ok=False, error=message)


def _argument_error(tool: Tool, arguments: Any) -> str | None:
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(tool.parameters).iter_errors(arguments))
    if error is None:
        return None
    where = "".join(f"[{p!r}]" for p in error.absolute_path)
    return f"invalid arguments for tool {tool.name!r}: {('arguments' + where + ': ') if where else ''}{error.message}"


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, (dict, list, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):  # e.g. circular references
            pass
    return str(value)


def _run_with_timeout(tool: Tool, arguments: dict, timeout_s: float) -> ToolResult:
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def work() -> None:
        try:
            outcome["content"] = _as_text(tool.fn(**arguments))
        except BaseException as e:  # SystemExit from a tool must not pass silently either
            outcome["error"] = f"{type(e).__name__}: {e}"
        finally:
            finished.set()

    threading.Thread(target=work, name=f"tool-{tool.name}", daemon=True).start()
    if not finished.wait(timeout_s):
        return _failure(f"tool {tool.name!r} timed out after {timeout_s:g}s")
    if "error" in outcome:
        return _failure(outcome["error"])
    return ToolResult(content=outcome["content"], ok=True)


def call_tool(registry: ToolRegistry, call: ToolCall, timeout_s: float | None = None) -> ToolResult:
    """Validate and run `call`; the tool's own timeout applies unless `timeout_s` overrides it."""
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    if call.name not in registry:
        return _failure(f"unknown tool {call.name!r}; known tools: {registry.known()}")
    tool = registry.get(call.name)
    error = _argument_error(tool, call.arguments)
    if error is not None:
        return _failure(error)
    return _run_with_timeout(tool, dict(call.arguments), tool.timeout_s if timeout_s is None else timeout_s)
