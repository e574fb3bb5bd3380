"""Tools from documented functions, their schemas, and the registry that names them."""

from __future__ import annotations

import pytest

from reinforge.envs.tools.registry import Tool, ToolDefinitionError, ToolRegistry, UnknownToolError, tool_from_function


def add(a: int, b: int = 0) -> int:
    """Add two integers.

    Args:
        a: the first addend
        b: the second addend
    """
    return a + b


def shout(text: str, times: int) -> str:
    """Repeat text in capitals.

    Args:
        text: what to shout
        times: how many times
    """
    return text.upper() * times


def test_tool_from_function_reads_signature_and_docstring() -> None:
    tool = tool_from_function(add, timeout_s=1.5)
    assert tool.name == "add" and tool.timeout_s == 1.5 and tool.fn is add
    assert tool.schema() == {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer", "description": "the first addend"},
                               "b": {"type": "integer", "description": "the second addend"}},
                "required": ["a"],
            },
        },
    }
    assert tool(2, b=3) == 5  # a Tool stays callable like its function
    assert tool_from_function(add, name="plus").name == "plus"


def test_missing_docstring_or_type_hints_give_a_clear_error() -> None:
    def undocumented(x: int) -> int:
        return x

    def untyped(x):
        """Do it.

        Args:
            x: a value
        """

    def undescribed(x: int) -> int:
        """Does something but documents no argument."""

    with pytest.raises(ToolDefinitionError, match=r"undocumented.*no docstring.*Google-style docstring"):
        tool_from_function(undocumented)
    with pytest.raises(ToolDefinitionError, match=r"untyped.*type hint"):
        tool_from_function(untyped)
    with pytest.raises(ToolDefinitionError, match=r"undescribed.*'x'.*Args:"):
        tool_from_function(undescribed)


def test_tool_validates_its_definition() -> None:
    params = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    with pytest.raises(ToolDefinitionError, match="name"):
        Tool(name="bad name!", description="d", parameters=params, fn=print)
    with pytest.raises(ToolDefinitionError, match="description"):
        Tool(name="t", description=" ", parameters=params, fn=print)
    with pytest.raises(ToolDefinitionError, match="JSON schema object"):
        Tool(name="t", description="d", parameters={"type": "string"}, fn=print)
    with pytest.raises(ToolDefinitionError, match="required"):
        Tool(name="t", description="d", parameters={**params, "required": ["nope"]}, fn=print)
    with pytest.raises(ToolDefinitionError, match="not a valid JSON schema"):
        Tool(name="t", description="d", parameters={"type": "object", "properties": {"q": {"type": "strange"}}}, fn=print)
    with pytest.raises(ToolDefinitionError, match="timeout_s"):
        Tool(name="t", description="d", parameters=params, fn=print, timeout_s=0)
    with pytest.raises(ToolDefinitionError, match="callable"):
        Tool(name="t", description="d", parameters=params, fn="print")


def test_registry_register_get_names_schemas() -> None:
    registry = ToolRegistry()
    registry.register(shout, timeout_s=2.0)
    registry.register(tool_from_function(add), name="plus")

    @registry.register
    def echo(text: str) -> str:
        """Echo the text back.

        Args:
            text: anything
        """
        return text

    @registry.register(name="echo2", timeout_s=0.5)
    def echo_again(text: str) -> str:
        """Echo the text back again.

        Args:
            text: anything
        """
        return text

    assert isinstance(echo, Tool) and echo("hi") == "hi"
    assert len(registry) == 4
    assert registry.names() == ["echo", "echo2", "plus", "shout"]
    assert "plus" in registry and "add" not in registry and 3 not in registry
    assert registry.get("shout").timeout_s == 2.0 and registry.get("echo2").timeout_s == 0.5
    assert registry.get("echo2").fn is echo_again.fn
    assert [s["function"]["name"] for s in registry.schemas()] == registry.names()
    assert registry.schemas()[2]["function"]["parameters"]["required"] == ["a"]
    with pytest.raises(UnknownToolError, match=r"unknown tool 'nope'; known tools: echo, echo2, plus, shout"):
        registry.get("nope")


def test_registry_refuses_duplicates_and_junk() -> None:
    registry = ToolRegistry([tool_from_function(add)])
    with pytest.raises(ToolDefinitionError, match="already registered"):
        registry.register(add)
    registry.register(add, name="add2")
    with pytest.raises(ToolDefinitionError, match="takes a Tool or a function"):
        registry.register(42)


def test_schemas_feed_a_chat_template(tokenizer) -> None:
    registry = ToolRegistry([tool_from_function(add), tool_from_function(shout)])
    template = ("{% for tool in tools %}{{ tool.function.name }}({{ tool.function.parameters.required | join(',') }})\n"
                "{% endfor %}{% for m in messages %}{{ m.content }}{% endfor %}")
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tools=registry.schemas(),
                                         chat_template=template, tokenize=False)
    assert text == "add(a)\nshout(text,times)\nhi"
