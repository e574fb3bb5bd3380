"""A calculator tool: exact arithmetic on a safe subset of Python expressions.

The expression is parsed with `ast` and evaluated by walking the tree; nothing is ever passed to
`eval`, so names, attributes, calls (other than abs/min/max/round), strings and comprehensions
are refused instead of run. Integers stay exact (Python ints), `/` gives an int when the division
is exact, and every intermediate result is bounded so `2**10**10` or `9**9**9` is refused up
front instead of freezing the worker.
"""

from __future__ import annotations

import ast
import math
import operator

from reinforge.envs.tools.registry import Tool, tool_from_function

Number = int | float
_LOG2_10 = math.log2(10)


class CalculatorError(ValueError):
    """The expression is not allowed, not valid, or its result is too large."""


def _true_division(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int) and a % b == 0:
        return a // b  # exact: keep it an int (6/3 is 2, not 2.0)
    return a / b


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _true_division,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"abs": (abs, 1, 1), "min": (min, 1, 64), "max": (max, 1, 64), "round": (round, 1, 2)}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
_ALLOWED = "numbers, + - * / // % **, parentheses and abs/min/max/round"


class _Evaluator:
    def __init__(self, max_digits: int) -> None:
        self.max_digits = max_digits
        # |n| < 2**bits  =>  n has at most ceil(bits / log2(10)) digits: cheap test before str(n)
        self.max_bits = math.ceil(max_digits * _LOG2_10) + 1

    def check(self, value: Number) -> Number:
        if isinstance(value, float) and not math.isfinite(value):
            raise CalculatorError("result is too large for a float")
        if isinstance(value, int) and (value.bit_length() > self.max_bits or len(str(abs(value))) > self.max_digits):
            raise CalculatorError(f"result has more than {self.max_digits} digits")
        return value

    def power(self, base: Number, exponent: Number) -> Number:
        # Bound the size of the result *before* computing it: int powers grow without limit.
        # (|exponent| > max_bits is tested first: a huge exponent would overflow the float product.)
        if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1:
            result_bits = math.inf if abs(exponent) > self.max_bits else abs(exponent) * math.log2(abs(base))
            if exponent > 0 and result_bits > self.max_bits:
                raise CalculatorError(f"result has more than {self.max_digits} digits")
            if exponent < 0 and result_bits > 1100:  # below 2**-1074, the smallest float: exactly 0.0
                return 0.0
        result = base ** exponent
        if isinstance(result, complex):
            raise CalculatorError("result is not a real number (fractional power of a negative number)")
        return result

    def evaluate(self, node: ast.AST) -> Number:
        if isinstance(node, ast.Expression):
            return self.evaluate(node.body)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise CalculatorError(f"{node.value!r} is not a number; only {_ALLOWED} are allowed")
            return self.check(node.value)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](self.evaluate(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self.evaluate(node.left), self.evaluate(node.right)
            if isinstance(node.op, ast.Pow):
                return self.check(self.power(left, right))
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
                raise CalculatorError(f"division by zero in '{_SYMBOLS[type(node.op)]}'")
            return self.check(_BINARY[type(node.op)](left, right))
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Name):
            raise CalculatorError(f"unknown name {node.id!r}; only {_ALLOWED} are allowed")
        if isinstance(node, ast.Attribute):
            raise CalculatorError(f"attribute access ('.{node.attr}') is not allowed; only {_ALLOWED} are allowed")
        raise CalculatorError(f"'{ast.unparse(node)[:40]}' is not allowed; only {_ALLOWED} are allowed")

    def call(self, node: ast.Call) -> Number:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in _FUNCTIONS:
            raise CalculatorError(f"calling '{ast.unparse(node.func)[:40]}' is not allowed; "
                                  "the only functions are abs, min, max and round")
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise CalculatorError(f"{name}() takes plain positional arguments only")
        fn, least, most = _FUNCTIONS[name]
        if not least <= len(node.args) <= most:
            raise CalculatorError(f"{name}() takes {least}" + (f" to {most}" if most > least else "")
                                  + f" argument(s), got {len(node.args)}")
        args = [self.evaluate(a) for a in node.args]
        if name == "round" and len(args) == 2:
            if not isinstance(args[1], int) or abs(args[1]) > self.max_digits:
                raise CalculatorError(f"round()'s digits must be an integer within ±{self.max_digits}")
        return self.check(fn(*args))


def evaluate(expression: str, *, max_digits: int = 1000, max_length: int = 500) -> Number:
    """The value of an arithmetic `expression`; raises CalculatorError for anything else."""
    if not isinstance(expression, str):
        raise CalculatorError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > max_length:
        raise CalculatorError(f"expression is longer than {max_length} characters")
    if not expression.strip():
        raise CalculatorError("expression is empty")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        detail = "" if e.msg == "invalid syntax" else f": {e.msg}"
        raise CalculatorError(f"invalid syntax{detail}") from None
    except (RecursionError, MemoryError, ValueError) as e:  # absurd nesting / null bytes
        raise CalculatorError(f"cannot parse expression: {type(e).__name__}") from None
    try:
        return _Evaluator(max_digits).evaluate(tree)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("result is too large for a float") from None
    except RecursionError:
        raise CalculatorError("expression is nested too deeply") from None


def calculator_tool(*, max_digits: int = 1000, max_length: int = 500, timeout_s: float = 2.0) -> Tool:
    """The `calculator` tool: its function returns the value as text and raises CalculatorError."""

    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression exactly, e.g. "123456 * 789" or "(2**64 - 1) % 97".

        Args:
            expression: numbers with + - * / // % ** and parentheses; abs, min, max and round are available.
        """
        return str(evaluate(expression, max_digits=max_digits, max_length=max_length))

    return tool_from_function(calculator, timeout_s=timeout_s)
