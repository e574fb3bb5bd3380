"""call_tool: every failure a model can cause comes back as an ok=False ToolResult, promptly."""

from __future__ import annotations

import threading
import time

import pytest

from reinforge.envs.tools.calls import ToolCall, parse_hermes
from reinforge.envs.tools.execution import ToolResult, call_tool
from reinforge.envs.tools.registry import ToolRegistry

release = threading.Event()  # lets the hung tool's abandoned thread finish when the module is done


@pytest.fixture(scope="module")
def registry():
    registry = ToolRegistry()

    @registry.register
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first
            b: second
        """
        return a + b

    @registry.register
    def explode(message: str) -> str:
        """Raise an error.

        Args:
            message: the error message
        """
        raise ValueError(message)

    @registry.register(timeout_s=0.3)
    def hang(seconds: float) -> str:
        """Block for a long time.

        Args:
            seconds: how long
        """
        release.wait(seconds)
        return "woke up"

    @registry.register
    def table(rows: int) -> list:
        """Build rows.

        Args:
            rows: how many
        """
        return [{"i": i} for i in range(rows)]

    @registry.register
    def nothing(flag: bool) -> None:
        """Return nothing.

        Args:
            flag: ignored
        """

    @registry.register
    def quit_(code: int) -> None:
        """Call SystemExit.

        Args:
            code: exit code
        """
        raise SystemExit(code)

    yield registry
    release.set()


def test_successful_call_returns_text(registry) -> None:
    assert call_tool(registry, ToolCall("add", {"a": 123456, "b": 789})) == ToolResult(content="124245", ok=True)
    assert call_tool(registry, ToolCall("table", {"rows": 2})).content == '[{"i": 0}, {"i": 1}]'
    assert call_tool(registry, ToolCall("nothing", {"flag": True})) == ToolResult(content="", ok=True)


def test_unknown_tool_names_the_known_ones(registry) -> None:
    turn = parse_hermes('<tool_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call>')
    result = call_tool(registry, turn.calls[0])
    assert not result.ok
    assert result.error == "unknown tool 'weather'; known tools: add, explode, hang, nothing, quit_, table"
    assert result.content == "error: " + result.error


@pytest.mark.parametrize("arguments, expected", [
    ({"a": 1}, "'b' is a required property"),
    ({"a": 1, "b": "2"}, "arguments['b']: '2' is not of type 'integer'"),
    ({"a": True, "b": 2}, "arguments['a']: True is not of type 'integer'"),
    ([1, 2], "[1, 2] is not of type 'object'"),
])
def test_bad_arguments_are_refused_before_running(registry, arguments, expected) -> None:
    result = call_tool(registry, ToolCall("add", arguments))
    assert not result.ok and result.error.startswith("invalid arguments for tool 'add': ")
    assert expected in result.error


def test_extra_argument_reaches_the_function_and_is_reported(registry) -> None:
    result = call_tool(registry, ToolCall("add", {"a": 1, "b": 2, "c": 3}))
    assert not result.ok and result.error.startswith("TypeError:") and "'c'" in result.error


def test_raising_tool_reports_type_and_message(registry) -> None:
    result = call_tool(registry, ToolCall("explode", {"message": "disk on fire"}))
    assert result == ToolResult(content="error: ValueError: disk on fire", ok=False, error="ValueError: disk on fire")
    assert call_tool(registry, ToolCall("quit_", {"code": 3})).error == "SystemExit: 3"


def test_hanging_tool_times_out_promptly(registry) -> None:
    start = time.monotonic()
    result = call_tool(registry, ToolCall("hang", {"seconds": 30}))
    assert time.monotonic() - start < 0.3 + 5  # the tool would sleep 30 s
    assert not result.ok and result.error == "tool 'hang' timed out after 0.3s"
    start = time.monotonic()
    result = call_tool(registry, ToolCall("hang", {"seconds": 30}), timeout_s=0.1)  # override
    assert time.monotonic() - start < 0.1 + 5 and "timed out after 0.1s" in result.error
    # a call that finishes within its time is unaffected by the abandoned threads
    assert call_tool(registry, ToolCall("hang", {"seconds": 0.01})).content == "woke up"


def test_bad_timeout_is_a_programming_error(registry) -> None:
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        call_tool(registry, ToolCall("add", {"a": 1, "b": 2}), timeout_s=0)
