"""The calculator: exact arithmetic by walking the AST, refusing everything else."""

from __future__ import annotations

import time

import pytest

from reinforge.envs.tools.calculator import CalculatorError, calculator_tool, evaluate
from reinforge.envs.tools.calls import ToolCall
from reinforge.envs.tools.execution import call_tool
from reinforge.envs.tools.registry import ToolRegistry


@pytest.mark.parametrize("expression, value", [
    ("123456*789", 97406784),
    ("123456789123456789 * 987654321987654321", 123456789123456789 * 987654321987654321),
    ("2**64 - 1", 18446744073709551615),
    ("(2**64 - 1) % 97", (2**64 - 1) % 97),
    ("6/3", 2),
    ("7/2", 3.5),
    ("-7//2", -4),
    ("2**-3", 0.125),
    ("-(3 + 4) * +2", -14),
    ("0.1 + 0.2", 0.1 + 0.2),
    ("1_000 * 3", 3000),
    ("abs(-5) + min(3, 1, 2) + max(4, 9)", 15),
    ("round(2.567, 2)", 2.57),
    ("10**999", 10**999),
])
def test_exact_values(expression, value) -> None:
    result = evaluate(expression)
    assert result == value and type(result) is type(value)


def test_exact_division_stays_an_integer_for_huge_numbers() -> None:
    assert evaluate("(10**300 * 7) / 7") == 10**300  # a float would have lost the digits


@pytest.mark.parametrize("expression, message", [
    ("__import__('os')", "calling '__import__' is not allowed"),
    ("__import__('os').system('echo hi')", "calling '__import__('os').system' is not allowed"),
    ("open('/etc/passwd')", "calling 'open' is not allowed"),
    ("x + 1", "unknown name 'x'"),
    ("(1).real", "attribute access ('.real')"),
    ("'a' * 3", "'a' is not a number"),
    ("True + 1", "True is not a number"),
    ("[1, 2]", "'[1, 2]' is not allowed"),
    ("[x for x in range(9)]", "is not allowed"),
    ("1 < 2", "is not allowed"),
    ("max(*[1, 2])", "plain positional arguments"),
    ("round(1.5, ndigits=1)", "plain positional arguments"),
    ("abs(1, 2)", "abs() takes 1 argument(s), got 2"),
    ("1/0", "division by zero"),
    ("5 % 0", "division by zero"),
    ("0 ** -1", "division by zero"),
    ("1 +", "invalid syntax"),
    ("(1 + 2", "invalid syntax: '(' was never closed"),
    ("", "expression is empty"),
    ("2**10**10", "more than 1000 digits"),
    ("9**9**9", "more than 1000 digits"),
    ("2**3**4**5", "more than 1000 digits"),
    ("10**999 * 10", "more than 1000 digits"),
    ("1e308 * 10", "too large for a float"),
    ("10**400 / 3", "too large for a float"),
    ("(-8) ** (1/3)", "not a real number"),
    ("round(1.5, 10**9)", "round()'s digits"),
    ("1+" * 300 + "1", "longer than 500 characters"),
])
def test_refusals_are_clear(expression, message) -> None:
    start = time.monotonic()
    with pytest.raises(CalculatorError) as error:
        evaluate(expression)
    assert message in str(error.value)
    assert time.monotonic() - start < 5  # refused up front: computing any of these would take far longer


def test_limits_are_configurable() -> None:
    assert evaluate("10**20", max_digits=21) == 10**20
    with pytest.raises(CalculatorError, match="more than 20 digits"):
        evaluate("10**20", max_digits=20)
    with pytest.raises(CalculatorError, match="longer than 4 characters"):
        evaluate("1+2+3", max_length=4)


def test_calculator_tool_through_call_tool() -> None:
    registry = ToolRegistry([calculator_tool()])
    assert registry.get("calculator").parameters["required"] == ["expression"]
    ok = call_tool(registry, ToolCall("calculator", {"expression": "123456*789"}))
    assert ok.ok and ok.content == "97406784"
    refused = call_tool(registry, ToolCall("calculator", {"expression": "__import__('os')"}))
    assert not refused.ok and refused.error.startswith("CalculatorError: calling '__import__' is not allowed")
    huge = call_tool(registry, ToolCall("calculator", {"expression": "2**10**10"}))
    assert not huge.ok and "more than 1000 digits" in huge.error
