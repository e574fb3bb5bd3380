"""Built-in tools by name: a registry from names and options, with clear errors before any call."""

from __future__ import annotations

import sqlite3

import pytest

from reinforge.envs.tools.builtin import BUILTIN_TOOLS, build_tools, tool_options
from reinforge.envs.tools.calls import ToolCall
from reinforge.envs.tools.execution import call_tool
from reinforge.envs.tools.registry import ToolDefinitionError


def test_builtin_names_and_required_options() -> None:
    assert sorted(BUILTIN_TOOLS) == ["calculator", "python", "search", "sql"]
    assert tool_options("sql")[0] == ["db_path"] and tool_options("search")[0] == ["documents"]
    assert tool_options("calculator")[0] == [] and tool_options("python")[0] == []


def test_build_all_four_and_call_them(tmp_path) -> None:
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE t (x INTEGER)")
        connection.execute("INSERT INTO t VALUES (7)")
    connection.close()
    registry = build_tools(["calculator", "python", "sql", "search"], {
        "sql": {"db_path": str(db), "max_rows": 5},
        "search": {"documents": [{"id": "a", "text": "apples are red"}, {"id": "b", "text": "bananas are yellow"}]},
        "python": {"timeout_s": 2.0},
    })
    assert registry.names() == ["calculator", "python", "search", "sql"]
    assert [s["function"]["name"] for s in registry.schemas()] == registry.names()
    assert call_tool(registry, ToolCall("calculator", {"expression": "2**100"})).content == str(2**100)
    assert call_tool(registry, ToolCall("python", {"code": "print(2 + 2)"})).content == "4\n"
    assert call_tool(registry, ToolCall("sql", {"query": "SELECT x FROM t"})).content.splitlines()[2] == "7"
    assert call_tool(registry, ToolCall("search", {"query": "yellow"})).content.startswith("[1] b\n")


@pytest.mark.parametrize("names, options, message", [
    (["calculator", "browser"], None, "unknown tool(s) 'browser'; built-in tools: calculator, python, search, sql"),
    (["sql"], None, "tool 'sql' needs option(s) db_path"),
    (["search"], {"search": {}}, "tool 'search' needs option(s) documents"),
    (["calculator"], {"calculator": {"digits": 3}}, "tool 'calculator' has no option(s) digits; its options are: "
                                                     "max_digits, max_length, timeout_s"),
    (["calculator"], {"sql": {"db_path": "x"}}, "options given for tool(s) not selected: sql"),
    (["calculator", "calculator"], None, "listed more than once: calculator"),
    ("calculator", None, "takes a list of tool names"),
    (["calculator"], {"calculator": 3}, "options for tool 'calculator' must be a dict"),
])
def test_configuration_errors(names, options, message) -> None:
    with pytest.raises(ToolDefinitionError) as error:
        build_tools(names, options)
    assert message in str(error.value)


def test_factory_errors_surface_at_build_time(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.db"):
        build_tools(["sql"], {"sql": {"db_path": str(tmp_path / "missing.db")}})
