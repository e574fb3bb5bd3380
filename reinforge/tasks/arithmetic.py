"""The built-in task family: integer arithmetic, with a difficulty knob and an imperfect teacher.

Addition (`op: "+"`, the default recipe): `digits` sets the difficulty (operands drawn uniformly
from [0, 10**digits)); a list of digit counts (`digits: [1, 2, 3, 4]`) mixes difficulties, each task
drawing its count uniformly from the list (metadata `digits`: what a curriculum over difficulties, e.g.
prompt_value.dump_key=digits, groups tasks by). Supervised warm-up data comes from a teacher that forgets every carry in a
fraction `1 - teacher_accuracy` of its worked answers. A model imitating it learns the format and
puts real probability on the right answer, but its most likely answer on carry problems is the
teacher's mistake, so greedy accuracy after warm-up is low. Only a reward that checks the sum can
separate the two, which is exactly what RL with a verifier is for: this family is chosen so that
RL visibly helps.

Multiplication (`op: "*"`, the tool-agent recipe): a `digits`-digit number times a
`digits_b`-digit one, which a tiny model cannot compute but can hand to a calculator. A fraction
`tool_traces` of the warm-up demonstrations call the calculator and copy its result (multi-turn
messages in Hugging Face format); the others state the product directly. The warm-up model then
calls the tool only sometimes, and greedy decoding prefers the majority habit of answering
directly, which RL with a verifier turns around.
"""

from __future__ import annotations

import random
from typing import Any

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks.task import Task, TaskSplits

DEFAULTS: dict[str, Any] = {"digits": 2, "teacher_accuracy": 0.4, "op": "+", "digits_b": None, "tool_traces": 0.0, "question": "{a}{op}{b}="}
# `question` words the problem: "{a}{op}{b}=" is a completion prompt for a model trained from scratch;
# an instruct model reads a question better ("What is {a} + {b}?": SmolLM2-135M-Instruct's greedy
# accuracy on 2-digit sums went 12% with "What is 12+34=?" to 16-17%, recipes/smollm2.yaml).


def add_without_carry(a: int, b: int) -> int:
    """Digit-wise sum modulo 10: the teacher's systematic mistake."""
    result, place = 0, 1
    while a or b:
        result += ((a % 10 + b % 10) % 10) * place
        a, b, place = a // 10, b // 10, place * 10
    return result


def make_task(a: int, b: int, teacher_correct: bool, digits: int | None = None, question: str = DEFAULTS["question"]) -> Task:
    answer = a + b
    shown = answer if teacher_correct else add_without_carry(a, b)
    has_carry = add_without_carry(a, b) != answer
    return Task(
        id=f"add-{a}-{b}",
        prompt=question.format(a=a, b=b, op="+"),
        answer=str(answer),
        verifier="numeric",
        demonstration=str(shown),
        # Family: carry problems are the ones the teacher gets wrong, so evaluation splits on them.
        metadata={
            "a": a, "b": b, "has_carry": has_carry, "family": "carry" if has_carry else "no_carry",
            **({"digits": digits} if digits is not None else {}),
        },
    )


def calculator_trace(expression: str, result: str) -> list[dict]:
    """A demonstration that calls the calculator, reads its result and answers with it."""
    call = {"type": "function", "function": {"name": "calculator", "arguments": {"expression": expression}}}
    return [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": result},
        {"role": "assistant", "content": result},
    ]


def make_product_task(a: int, b: int, with_tool: bool, question: str = DEFAULTS["question"]) -> Task:
    answer = str(a * b)
    return Task(
        id=f"mul-{a}-{b}",
        prompt=question.format(a=a, b=b, op="*"),
        answer=answer,
        verifier="numeric",
        demonstration=calculator_trace(f"{a}*{b}", answer) if with_tool else answer,
        metadata={"a": a, "b": b, "family": "multiply"},
    )


def _params(cfg: TaskConfig) -> dict[str, Any]:
    unknown = set(cfg.params) - set(DEFAULTS)
    if unknown:
        raise ConfigError(f"task.params: unknown arithmetic parameter(s) {sorted(unknown)}; valid: {sorted(DEFAULTS)}")
    params = {**DEFAULTS, **cfg.params}
    _check_question(params["question"])
    mixed = params["digits"]
    if isinstance(mixed, list):
        if not mixed or not all(isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= 9 for d in mixed) or len(set(mixed)) != len(mixed):
            raise ConfigError(f"task.params.digits as a list mixes difficulties: distinct integers in 1..9, got {mixed!r}")
        if params["op"] != "+":
            raise ConfigError("task.params.digits as a list (mixed difficulties) is for op='+'; give one digit count for op='*'")
        if not 0.0 <= float(params["teacher_accuracy"]) <= 1.0:
            raise ConfigError(f"task.params.teacher_accuracy must be in [0, 1], got {params['teacher_accuracy']!r}")
        smallest = 10 ** (2 * min(mixed))
        if cfg.eval_size > smallest * len(mixed) // 2:  # draws of the smallest count stay within half its pairs
            raise ConfigError(
                f"task.eval_size={cfg.eval_size}: held-out problems would take too many of the {smallest} pairs of "
                f"{min(mixed)}-digit operands; use task.eval_size <= {smallest * len(mixed) // 2}"
            )
        return params
    if not isinstance(mixed, int) or not 1 <= mixed <= 9:
        raise ConfigError(f"task.params.digits must be an integer in 1..9 (or a list of them), got {mixed!r}")
    if not 0.0 <= float(params["teacher_accuracy"]) <= 1.0:
        raise ConfigError(f"task.params.teacher_accuracy must be in [0, 1], got {params['teacher_accuracy']!r}")
    if params["op"] not in ("+", "*"):
        raise ConfigError(f"task.params.op must be '+' or '*', got {params['op']!r}")
    params["digits_b"] = params["digits"] if params["digits_b"] is None else params["digits_b"]
    if not isinstance(params["digits_b"], int) or not 1 <= params["digits_b"] <= 9:
        raise ConfigError(f"task.params.digits_b must be an integer in 1..9, got {params['digits_b']!r}")
    if not 0.0 <= float(params["tool_traces"]) <= 1.0:
        raise ConfigError(f"task.params.tool_traces must be in [0, 1], got {params['tool_traces']!r}")
    if params["tool_traces"] and params["op"] != "*":
        raise ConfigError("task.params.tool_traces (calculator demonstrations) is only for op='*'")
    space = 10 ** (params["digits"] + params["digits_b"])
    if cfg.eval_size > space // 2:
        raise ConfigError(f"task.eval_size={cfg.eval_size} leaves too few training problems for digits={params['digits']}")
    return params


def _check_question(question: Any) -> None:
    if not isinstance(question, str) or "{a}" not in question or "{b}" not in question:
        raise ConfigError(f"task.params.question must be text holding {{a}} and {{b}} (and optionally {{op}}), e.g. 'What is {{a}} + {{b}}?'; got {question!r}")
    try:
        question.format(a=1, b=2, op="+")
    except (KeyError, IndexError, ValueError) as err:
        raise ConfigError(f"task.params.question {question!r}: only {{a}}, {{b}} and {{op}} can be filled in ({type(err).__name__}: {err}); write a literal brace as {{{{ or }}}}") from None


def check(cfg: TaskConfig) -> None:
    _params(cfg)


def load(cfg: TaskConfig, seed: int) -> TaskSplits:
    params = _params(cfg)
    if isinstance(params["digits"], list):
        return load_mixed(cfg, params, seed)
    rng = random.Random(seed)
    high_a, high_b = 10 ** params["digits"], 10 ** params["digits_b"]
    if params["op"] == "*":
        # operands with exactly the stated digits: multiplying by 0-9 needs no tool
        low_a, low_b = high_a // 10, high_b // 10
    else:
        low_a = low_b = 0

    def draw() -> tuple[int, int]:
        return rng.randrange(low_a, high_a), rng.randrange(low_b, high_b)

    def make(pair: tuple[int, int], demo_draw: float) -> Task:
        if params["op"] == "*":
            return make_product_task(*pair, with_tool=demo_draw < params["tool_traces"], question=params["question"])
        return make_task(*pair, teacher_correct=demo_draw < params["teacher_accuracy"], question=params["question"])

    held_out: set[tuple[int, int]] = set()
    while len(held_out) < cfg.eval_size:
        held_out.add(draw())
    eval_tasks = [make(pair, 0.0) for pair in sorted(held_out)]
    rng.shuffle(eval_tasks)

    # Training problems never include a held-out pair; repeats among them are harmless.
    train_tasks = []
    while len(train_tasks) < cfg.train_size:
        pair = draw()
        if pair not in held_out:
            train_tasks.append(make(pair, rng.random()))
    return TaskSplits(train=train_tasks, eval=eval_tasks)


def load_mixed(cfg: TaskConfig, params: dict[str, Any], seed: int) -> TaskSplits:
    """Addition with a digit count drawn per task from params["digits"]; held-out pairs never train."""
    rng = random.Random(seed)

    def draw() -> tuple[int, int, int]:
        digits = rng.choice(params["digits"])
        return rng.randrange(10**digits), rng.randrange(10**digits), digits

    held_out: dict[tuple[int, int], int] = {}
    while len(held_out) < cfg.eval_size:
        a, b, digits = draw()
        held_out.setdefault((a, b), digits)
    eval_tasks = [make_task(a, b, True, digits, params["question"]) for (a, b), digits in sorted(held_out.items())]
    rng.shuffle(eval_tasks)
    train_tasks = []
    while len(train_tasks) < cfg.train_size:
        a, b, digits = draw()
        if (a, b) not in held_out:
            train_tasks.append(make_task(a, b, rng.random() < params["teacher_accuracy"], digits, params["question"]))
    return TaskSplits(train=train_tasks, eval=eval_tasks)
