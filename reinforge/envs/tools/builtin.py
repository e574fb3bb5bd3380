"""The built-in tools by name, and a registry built from a list of names (or import paths of the
user's own tools) plus per-tool options.

Each factory's keyword arguments are its options; the ones without a default are required
(sql needs `db_path`, search needs `documents`). They are read from the factory signatures, so
adding a tool here is one line and its options are checked without a second list to keep in sync.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable

from reinforge.envs.tools.calculator import calculator_tool
from reinforge.import_paths import ImportPathError, is_import_path, load_object
from reinforge.envs.tools.python_tool import python_tool
from reinforge.envs.tools.registry import Tool, ToolDefinitionError, ToolRegistry, tool_from_function
from reinforge.envs.tools.search import search_tool
from reinforge.envs.tools.sql import sql_tool

BUILTIN_TOOLS: dict[str, Callable[..., Tool]] = {
    "calculator": calculator_tool,
    "python": python_tool,
    "sql": sql_tool,
    "search": search_tool,
}


def tool_options(name: str) -> tuple[list[str], list[str]]:
    """(required, optional) option names of the built-in tool `name`."""
    parameters = inspect.signature(BUILTIN_TOOLS[name]).parameters.values()
    required = [p.name for p in parameters if p.default is inspect.Parameter.empty]
    optional = [p.name for p in parameters if p.default is not inspect.Parameter.empty]
    return required, optional


def build_tools(names: Iterable[str], options: dict[str, dict[str, Any]] | None = None) -> ToolRegistry:
    """A registry holding the built-in tools `names`, each made with `options[name]`."""
    if isinstance(names, str):  # "calculator" would otherwise be read as ten one-letter names
        raise ToolDefinitionError(f"build_tools takes a list of tool names, got the string {names!r}")
    names = list(names)
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise ToolDefinitionError(f"tool options must be a dict of {{tool name: {{option: value}}}}, got {options!r}")
    known = ", ".join(sorted(BUILTIN_TOOLS))
    unknown = [n for n in names if n not in BUILTIN_TOOLS and not is_import_path(n)]
    if unknown:
        raise ToolDefinitionError(
            f"unknown tool(s) {', '.join(map(repr, unknown))}; built-in tools: {known}; or your own typed, "
            "docstringed function as 'package.module:name' or './file.py:name'"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ToolDefinitionError(f"tool(s) listed more than once: {', '.join(repeated)}")
    stray = sorted(set(options) - set(names))
    if stray:
        raise ToolDefinitionError(f"options given for tool(s) not selected: {', '.join(stray)}; selected: {names}")
    registry = ToolRegistry()
    for name in names:
        if is_import_path(name):
            registry.register(user_tool(name, options.get(name)))
            continue
        given = options.get(name) or {}
        if not isinstance(given, dict):
            raise ToolDefinitionError(f"options for tool {name!r} must be a dict, got {given!r}")
        required, optional = tool_options(name)
        missing = [k for k in required if k not in given]
        if missing:
            raise ToolDefinitionError(f"tool {name!r} needs option(s) {', '.join(missing)} "
                                      f"(e.g. options={{{name!r}: {{{missing[0]!r}: ...}}}})")
        extra = sorted(set(given) - set(required) - set(optional))
        if extra:
            raise ToolDefinitionError(f"tool {name!r} has no option(s) {', '.join(extra)}; "
                                      f"its options are: {', '.join(required + optional)}")
        registry.register(BUILTIN_TOOLS[name](**given))
    return registry


def user_tool(path: str, options: Any = None) -> Tool:
    """The user's tool named by import path: a `Tool`, or a type-hinted function with a Google-style
    docstring (its schema is read from both, as for the built-ins). It runs in the trainer's
    process, like the calculator: model-written code belongs in the `python` tool's sandbox."""
    if options:
        raise ToolDefinitionError(f"tool {path!r} is named by import path and takes no env.tool_options; "
                                  "give its function the values it needs (defaults or functools.partial)")
    try:
        target = load_object(path)
    except ImportPathError as err:
        raise ToolDefinitionError(f"tool {err}") from None
    return target if isinstance(target, Tool) else tool_from_function(target)
