"""An agent written only against the `openai` client: it knows nothing of reinforge.

It asks the model for the answer to an arithmetic task, offering a `calculator` function tool;
when the model calls it, the agent evaluates the expression itself (safely: numbers and + - * / //
% ** and parentheses only, no eval of code), sends the result back as a tool message, and asks
again. It returns the model's final text. The same code runs against any OpenAI-compatible
endpoint: `reinforge train` points `client` at its gateway; `reinforge serve` (or any other
server) works the same way.
"""

from __future__ import annotations

import ast
import json
import operator
import warnings

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression exactly, e.g. 123*45.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "the expression to evaluate"}},
            "required": ["expression"],
        },
    },
}
TOOLS = [CALCULATOR]  # named in the recipe as env.agent_tools, so warm-up renders prompts as the agent sends them

_OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
MAX_EXPONENT = 64


def calculate(expression: str) -> str:
    """The value of `expression` as text; ValueError for anything but arithmetic on numbers."""

    def value(node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = value(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
                raise ValueError(f"exponent {right} is too large")
            return _OPERATORS[type(node.op)](left, right)
        raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")

    try:
        with warnings.catch_warnings():  # "123x" parses with a SyntaxWarning before it fails: not worth a line on stderr
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(expression.strip(), mode="eval")
        result = value(tree.body)
    except (SyntaxError, ZeroDivisionError) as err:
        raise ValueError(str(err)) from None
    if isinstance(result, float) and result.is_integer():
        result = int(result)
    return str(result)


async def solve(task, client, max_rounds: int = 3) -> str:
    """Answer `task` (its `prompt` is the question) with the model behind `client`."""
    model = (await client.models.list()).data[0].id
    messages = [{"role": "user", "content": task.prompt}]
    for _ in range(max_rounds):
        response = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            try:
                expression = json.loads(call.function.arguments).get("expression", "")
                content = calculate(str(expression))
            except (ValueError, AttributeError, json.JSONDecodeError) as err:
                content = f"error: {err}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    return message.content or ""
