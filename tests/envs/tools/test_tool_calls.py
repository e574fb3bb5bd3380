"""Parsing tool calls out of a model turn (hermes and compact formats), and writing them back."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reinforge.envs.tools.calls import PARSERS, ParsedTurn, ToolCall, format_call, parse, parse_compact, parse_hermes
from reinforge.envs.tools.registry import ToolRegistry


@pytest.fixture(scope="module")
def registry() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.register
    def calculator(expression: str) -> str:
        """Evaluate arithmetic.

        Args:
            expression: the expression
        """
        return expression

    @registry.register
    def square(n: int) -> int:
        """Square a number.

        Args:
            n: the number
        """
        return n * n

    @registry.register
    def lookup(table: str, key: str, limit: int = 10) -> str:
        """Look a key up.

        Args:
            table: where
            key: what
            limit: how many
        """
        return key

    return registry


# --- hermes -------------------------------------------------------------------------------------

def test_hermes_several_calls_and_text(registry) -> None:
    text = ('Let me compute. <tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>'
            ' and <tool_call>{"name": "lookup", "arguments": "{\\"table\\": \\"t\\", \\"key\\": \\"k\\"}"}</tool_call>'
            ' done.')
    turn = parse_hermes(text, registry)
    assert turn.calls == [ToolCall("calculator", {"expression": "2+2"}), ToolCall("lookup", {"table": "t", "key": "k"})]
    assert turn.errors == []
    assert turn.text == "Let me compute.  and  done."


def test_hermes_no_calls_is_just_text() -> None:
    assert parse_hermes("  The answer is 4.  ") == ParsedTurn(calls=[], errors=[], text="The answer is 4.")


def test_hermes_broken_calls_become_errors_not_exceptions(registry) -> None:
    text = ('<tool_call>{"name": "calculator" "arguments": {}}</tool_call>'  # missing comma
            '<tool_call>{"arguments": {"expression": "1"}}</tool_call>'  # no name
            '<tool_call>{"name": "calculator", "arguments": [1, 2]}</tool_call>'  # arguments not an object
            '<tool_call>{"name": "calculator", "arguments": "not json"}</tool_call>'
            '<tool_call>["calculator"]</tool_call>'
            '<tool_call>{"name": "square", "arguments": {"n": 3}}</tool_call>'  # the one good call
            ' tail </tool_call> <tool_call>{"name": "square", "arguments": {"n": 4}')  # stray close, unclosed open
    turn = parse_hermes(text, registry)
    assert turn.calls == [ToolCall("square", {"n": 3})]
    assert turn.errors[0].startswith("malformed tool call: Expecting ',' delimiter")
    assert 'missing "name"' in turn.errors[1]
    assert "arguments must be a JSON object, got list" in turn.errors[2]
    assert "arguments string is not JSON" in turn.errors[3]
    assert "expected {" in turn.errors[4]
    assert turn.errors[5] == "</tool_call> without a matching <tool_call>"
    assert turn.errors[6].startswith("unclosed <tool_call>")
    assert len(turn.errors) == 7
    assert turn.text == "tail"


def test_hermes_unclosed_call_followed_by_a_good_one() -> None:
    turn = parse_hermes('<tool_call>{"name": "a"  <tool_call>{"name": "b", "arguments": {}}</tool_call>')
    assert turn.calls == [ToolCall("b", {})]
    assert len(turn.errors) == 1 and turn.errors[0].startswith("unclosed <tool_call>")


def test_hermes_unknown_tool_is_a_call_not_a_parse_error(registry) -> None:
    turn = parse_hermes('<tool_call>{"name": "weather", "arguments": {"city": "Paris"}}</tool_call>', registry)
    assert turn.calls == [ToolCall("weather", {"city": "Paris"})] and turn.errors == []


# --- compact ------------------------------------------------------------------------------------

def test_compact_plain_text_binds_the_single_parameter(registry) -> None:
    turn = parse_compact("First <<calculator: 123456 * 789>> then <<square: 12>> and <<lookup: "
                         '{"table": "t", "key": "k", "limit": 2}>>.', registry)
    assert turn.calls == [ToolCall("calculator", {"expression": "123456 * 789"}), ToolCall("square", {"n": 12}),
                          ToolCall("lookup", {"table": "t", "key": "k", "limit": 2})]
    assert turn.errors == [] and turn.text == "First  then  and ."


def test_compact_plain_text_for_an_integer_that_is_not_one_stays_text(registry) -> None:
    # call_tool then reports the schema mismatch; the parser does not guess.
    assert parse_compact("<<square: twelve>>", registry).calls == [ToolCall("square", {"n": "twelve"})]


def test_compact_errors(registry) -> None:
    turn = parse_compact("<<lookup: t k>> <<calculator: {bad json}>> <<weather: Paris>> <<no colon>> "
                         "<<calculator: 1+1", registry)
    assert turn.calls == []
    assert "takes several parameters" in turn.errors[0] and '<<lookup: {"table": ..., "key": ...}>>' in turn.errors[0]
    assert turn.errors[1].startswith("malformed tool call: Expecting property name")
    assert turn.errors[2] == "unknown tool 'weather'; known tools: calculator, lookup, square"
    assert "expected <<tool_name: arguments>>" in turn.errors[3]
    assert turn.errors[4].startswith("unclosed <<") and "has no >>" in turn.errors[4]
    assert len(turn.errors) == 5


def test_compact_plain_text_to_a_tool_without_parameters() -> None:
    registry = ToolRegistry()

    @registry.register
    def now() -> str:
        """The current time."""
        return "noon"

    assert parse_compact("<<now: >> <<now: {}>>", registry).calls == [ToolCall("now", {}), ToolCall("now", {})]
    assert parse_compact("<<now: please>>", registry).errors == ["tool 'now' takes no arguments; call it as <<now: {}>>"]


def test_compact_unknown_tool_with_json_arguments_is_a_call(registry) -> None:
    assert parse_compact('<<weather: {"city": "Paris"}>>', registry).calls == [ToolCall("weather", {"city": "Paris"})]


def test_parse_by_style_and_unknown_style(registry) -> None:
    assert set(PARSERS) == {"hermes", "compact"}
    assert parse("<<square: 2>>", "compact", registry).calls == [ToolCall("square", {"n": 2})]
    with pytest.raises(ValueError, match="unknown tool-call style 'xml'; known styles: compact, hermes"):
        parse("", "xml", registry)
    with pytest.raises(ValueError, match="unknown tool-call style"):
        format_call(ToolCall("square", {"n": 2}), "xml", registry)


def test_format_call_shapes(registry) -> None:
    assert format_call(ToolCall("calculator", {"expression": "2+2"}), "compact", registry) == "<<calculator: 2+2>>"
    assert format_call(ToolCall("square", {"n": 7}), "compact", registry) == "<<square: 7>>"
    # ">>" inside the text would end the call early: the JSON form escapes it
    written = format_call(ToolCall("calculator", {"expression": "1 >> 2"}), "compact", registry)
    assert written == '<<calculator: {"expression": "1 \\u003e\\u003e 2"}>>'
    hermes = format_call(ToolCall("square", {"n": 7}), "hermes", registry)
    assert hermes == '<tool_call>\n{"name": "square", "arguments": {"n": 7}}\n</tool_call>'
    assert json.loads(hermes.split("\n")[1]) == {"name": "square", "arguments": {"n": 7}}


# --- round trip ---------------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
# text made of the pieces that delimit calls in either format
tricky_text = st.lists(st.sampled_from(list("ab {}<>:\"\\\n\t,é💥") + ["<<", ">>", "<tool_call>", "</tool_call>"]),
                       max_size=12).map("".join)
calls = st.one_of(
    st.builds(lambda s: ToolCall("calculator", {"expression": s}), st.text(max_size=40) | tricky_text),
    st.builds(lambda n: ToolCall("square", {"n": n}), st.integers() | json_values),
    st.builds(lambda args: ToolCall("lookup", args), st.dictionaries(st.text(max_size=10), json_values, max_size=4)),
    st.builds(lambda args: ToolCall("calculator", args), st.dictionaries(st.text(max_size=10) | tricky_text,
                                                                         json_values, max_size=3)),
)


@pytest.mark.parametrize("style", ["hermes", "compact"])
@settings(max_examples=150, deadline=None)
@given(call=calls, before=tricky_text.filter(lambda t: "<" not in t and ">" not in t))
def test_format_then_parse_round_trips(registry, style, call, before) -> None:
    written = format_call(call, style, registry)
    assert parse(written, style, registry) == ParsedTurn(calls=[call], errors=[], text="")
    # ... also between prose and next to another call
    turn = parse(before + written + written, style, registry)
    assert turn.calls == [call, call] and turn.errors == [] and turn.text == before.strip()
