"""task.params.question words arithmetic problems for an instruct model; the default stays "a+b="."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks import arithmetic


def test_default_question_is_the_completion_prompt():
    splits = arithmetic.load(TaskConfig(train_size=5, eval_size=3), seed=0)
    task = splits.eval[0]
    assert task.prompt == f"{task.metadata['a']}+{task.metadata['b']}="


@pytest.mark.parametrize("params", [{"digits": 2}, {"digits": [1, 2]}, {"op": "*", "digits": 1}])
def test_a_question_template_words_every_task_and_keeps_the_answer(params):
    cfg = TaskConfig(train_size=6, eval_size=4, params={**params, "question": "What is {a} {op} {b}?"})
    splits = arithmetic.load(cfg, seed=1)
    for task in splits.train + splits.eval:
        a, b = task.metadata["a"], task.metadata["b"]
        op = params.get("op", "+")
        assert task.prompt == f"What is {a} {op} {b}?"
        assert task.answer == str(a * b if op == "*" else a + b)


@pytest.mark.parametrize("question, message", [
    ("What is {a}?", "holding {a} and {b}"),
    (7, "must be text"),
    ("{a} + {b} = {c}", "only {a}, {b} and {op}"),
])
def test_bad_question_templates_are_refused_before_loading(question, message):
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        arithmetic.check(TaskConfig(params={"question": question}))
