"""`reinforge eval` on SmolLM2-135M-Instruct: its chat template renders the recipe's prompt, and the
answers it writes in prose are read by the `auto` extractor (real_model group)."""

from __future__ import annotations

import json

import pytest

from reinforge.cli import main

pytestmark = pytest.mark.real_model

TASK = ["task.params.digits=1", "task.eval_size=6", "task.train_size=50", "eval.max_new_tokens=48", "trainer.threads=1",
        "rollout.prompt_format=auto"]


def run(model, out, *overrides: str) -> dict:
    assert main(["eval", "--model", str(model), "--samples", "0", "--output", str(out), *TASK, *overrides]) == 0
    return json.loads((out / "eval.json").read_text())


def test_the_chat_template_renders_the_recipes_prompt_and_auto_reads_prose_answers(real_model_dir, tmp_path) -> None:
    default = run(real_model_dir, tmp_path / "default", "task.instruction='What is {question}?'", "task.answer_extractor=auto")
    first = default["prompting"]["first_prompt"]
    # no task.system_prompt: the template's own system message; the instruction around the question
    assert first.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM") and "What is " in first
    assert first.endswith("?<|im_end|>\n<|im_start|>assistant\n")
    answers = default["answers"]
    assert sum(answers.values()) == 6 and answers["no_answer"] == 0  # prose, but always with a number in it
    assert answers["correct"] >= 1  # measured 62% on 50 tasks with this prompt (docs/real_model.md), 0% with answer tags

    strict = run(real_model_dir, tmp_path / "system", "task.system_prompt='Answer briefly.'", "task.answer_extractor=answer_tags")
    assert strict["prompting"]["first_prompt"].startswith("<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\n")
    assert strict["answers"]["correct"] == 0 and strict["answers"]["no_answer"] >= 5  # it does not write tags unasked
