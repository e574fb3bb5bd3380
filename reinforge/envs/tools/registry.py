"""Tools an agent can call, and the registry that names them.

A `Tool` is a plain Python function plus the JSON schema the model sees. The schema is exactly
what `tokenizer.apply_chat_template(..., tools=[tool.schema() for ...])` takes, so the prompt the
policy is trained on describes the same tools the environment runs.

Schemas are read from the function's signature and Google-style docstring by the maintained
Hugging Face helper (`transformers.utils.get_json_schema`), so a tool is written once, as a
documented, type-hinted function.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import jsonschema
from transformers.utils import get_json_schema

# The OpenAI function-name rule; it also keeps names free of the characters the compact
# call format uses as delimiters (`<<name: ...>>`).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
DEFAULT_TIMEOUT_S = 5.0


class ToolDefinitionError(ValueError):
    """A tool (or a registry operation) is defined wrongly; raised when the tool is built, not called."""


class UnknownToolError(LookupError):
    """A registry lookup for a name that was never registered."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict  # JSON schema of the keyword arguments: {"type": "object", "properties", "required"}
    fn: Callable[..., Any]
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _TOOL_NAME.fullmatch(self.name):
            raise ToolDefinitionError(
                f"tool name {self.name!r} is invalid: use 1-64 letters, digits, '_' or '-'")
        if not isinstance(self.description, str) or not self.description.strip():
            raise ToolDefinitionError(f"tool {self.name!r} needs a non-empty description")
        if not callable(self.fn):
            raise ToolDefinitionError(f"tool {self.name!r}: fn must be callable, got {type(self.fn).__name__}")
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)) or not self.timeout_s > 0:
            raise ToolDefinitionError(f"tool {self.name!r}: timeout_s must be a positive number, got {self.timeout_s!r}")
        _check_parameters_schema(self.name, self.parameters)

    @property
    def required(self) -> list[str]:
        return list(self.parameters.get("required", []))

    @property
    def properties(self) -> dict[str, dict]:
        return dict(self.parameters.get("properties", {}))

    def schema(self) -> dict:
        """The OpenAI / Hugging Face function-tool description of this tool."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Lets `@registry.register` return the Tool while the decorated name stays callable.
        return self.fn(*args, **kwargs)


def _check_parameters_schema(name: str, parameters: Any) -> None:
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ToolDefinitionError(
            f"tool {name!r}: parameters must be a JSON schema object like "
            f'{{"type": "object", "properties": {{...}}, "required": [...]}}, got {parameters!r}')
    properties = parameters.get("properties", {})
    if not isinstance(properties, dict):
        raise ToolDefinitionError(f"tool {name!r}: parameters.properties must be a dict, got {properties!r}")
    required = parameters.get("required", [])
    if not isinstance(required, list) or any(r not in properties for r in required):
        raise ToolDefinitionError(
            f"tool {name!r}: parameters.required must list names from properties {sorted(properties)}, got {required!r}")
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as e:
        raise ToolDefinitionError(f"tool {name!r}: parameters is not a valid JSON schema: {e.message}") from None


def tool_from_function(fn: Callable[..., Any], *, name: str | None = None,
                       timeout_s: float = DEFAULT_TIMEOUT_S) -> Tool:
    """Build a Tool from a type-hinted function with a Google-style docstring."""
    label = getattr(fn, "__qualname__", None) or repr(fn)
    if not callable(fn):
        raise ToolDefinitionError(f"cannot make a tool from {label}: it is not callable")
    try:
        spec = get_json_schema(fn)["function"]
    except Exception as e:  # the helper raises several unrelated types; all mean "fix the definition"
        raise ToolDefinitionError(
            f"cannot make a tool from function {label}: {e}. Give every parameter a type hint and "
            "write a Google-style docstring: a one-line description, then an 'Args:' section with "
            "one 'name: description' line per parameter.") from e
    return Tool(name=name if name is not None else spec["name"], description=spec["description"],
                parameters=spec["parameters"], fn=fn, timeout_s=timeout_s)


class ToolRegistry:
    """Tools by name: what the environment may run and what the chat template shows the model."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools or []:
            self.register(tool)

    def register(self, fn_or_tool: Callable[..., Any] | Tool | None = None, *, name: str | None = None,
                 timeout_s: float | None = None) -> Any:
        """Add a Tool, or build one from a documented function; returns the Tool.

        Works as a decorator too: `@registry.register` or `@registry.register(name=..., timeout_s=...)`
        (the decorated name is then the Tool, which is still callable like the function).
        """
        if fn_or_tool is None:
            return lambda fn: self.register(fn, name=name, timeout_s=timeout_s)
        if isinstance(fn_or_tool, Tool):
            changes: dict[str, Any] = {}
            if name is not None:
                changes["name"] = name
            if timeout_s is not None:
                changes["timeout_s"] = timeout_s
            tool = dataclasses.replace(fn_or_tool, **changes) if changes else fn_or_tool
        elif callable(fn_or_tool):
            tool = tool_from_function(fn_or_tool, name=name,
                                      timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s)
        else:
            raise ToolDefinitionError(
                f"register takes a Tool or a function, got {type(fn_or_tool).__name__}: {fn_or_tool!r}")
        if tool.name in self._tools:
            raise ToolDefinitionError(f"a tool named {tool.name!r} is already registered; pass name= to rename one")
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except (KeyError, TypeError):
            raise UnknownToolError(f"unknown tool {name!r}; known tools: {self.known()}") from None

    def known(self) -> str:
        """The registered names, for error messages."""
        return ", ".join(self.names()) or "(none)"

    def names(self) -> list[str]:
        return sorted(self._tools)

    def schemas(self) -> list[dict]:
        return [self._tools[name].schema() for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools[name] for name in self.names())
