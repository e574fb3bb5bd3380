"""task.system_prompt / task.instruction / task.answer_extractor: applied to every source's tasks
alike in one place (tasks.prompting, by tasks.registry.load_tasks), and checked before compute."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reinforge.config import ConfigError, TaskConfig, load_config
from reinforge.tasks.prompting import instructed, with_instruction, with_system_prompt
from reinforge.tasks.registry import check_task_config, load_tasks, source_instruction
from reinforge.tasks.task import Task, TaskSplits

SYSTEM = "You are a careful math assistant."


def test_instruction_follows_the_question_or_takes_its_place() -> None:
    assert with_instruction("12+34=", "End with: The answer is N.") == "12+34=\n\nEnd with: The answer is N."
    assert with_instruction("12+34=", "What is {question}?") == "What is 12+34=?"
    assert with_instruction("12+34=", "") == "12+34=" and with_instruction("12+34=", None) == "12+34="


def test_a_chat_prompt_gets_the_instruction_in_its_last_user_message() -> None:
    prompt = [
        {"role": "system", "content": "data's system"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "2+2="},
    ]
    out = instructed(prompt, "Be brief.", "t1")
    assert out[-1] == {"role": "user", "content": "2+2=\n\nBe brief."} and out[:3] == prompt[:3]
    assert prompt[-1]["content"] == "2+2="  # the task's own messages are not changed in place
    with pytest.raises(ConfigError, match="task t2: task.instruction .* no user message"):
        instructed([{"role": "system", "content": "s"}], "Be brief.", "t2")


def test_system_prompt_makes_a_chat_prompt_and_replaces_the_datas_own() -> None:
    assert with_system_prompt("2+2=", SYSTEM) == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "2+2="}]
    data = [{"role": "system", "content": "old"}, {"role": "user", "content": "q"}]
    assert with_system_prompt(data, SYSTEM) == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "q"}]
    assert with_system_prompt(data, None) is data
    assert with_system_prompt("q", "")[0] == {"role": "system", "content": ""}  # '' is an empty system message, not none


def arithmetic(**keys) -> TaskConfig:
    return TaskConfig(source="arithmetic", train_size=20, eval_size=4, params={"digits": 1}, **keys)


def test_unset_settings_keep_every_task_as_the_source_wrote_it() -> None:
    plain = load_tasks(arithmetic(), seed=0)
    task = plain.eval[0]
    assert task.prompt == f"{task.metadata['a']}+{task.metadata['b']}=" and task.answer_extractor == "response"


def test_arithmetic_tasks_get_the_instruction_system_prompt_and_extractor() -> None:
    splits = load_tasks(arithmetic(system_prompt=SYSTEM, instruction="What is {question}?", answer_extractor="auto"), seed=0)
    for task in splits.train + splits.eval:
        question = f"{task.metadata['a']}+{task.metadata['b']}="
        assert task.prompt == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {question}?"}]
        assert task.answer_extractor == "auto"


def test_jsonl_tasks_text_and_chat_get_the_same_settings(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    rows = [
        {"id": f"t{i}", "prompt": f"{i}+1=", "answer": i + 1, "verifier": "numeric"} for i in range(4)
    ] + [{"id": "chat", "prompt": [{"role": "system", "content": "data"}, {"role": "user", "content": "9+1="}], "answer": 10}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    cfg = TaskConfig(source="jsonl", path=str(path), eval_size=2, system_prompt=SYSTEM, instruction="Be brief.", answer_extractor="last_number")
    tasks = {t.id: t for t in (lambda s: s.train + s.eval)(load_tasks(cfg, seed=0))}
    assert tasks["t1"].prompt == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "1+1=\n\nBe brief."}]
    assert tasks["chat"].prompt == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "9+1=\n\nBe brief."}]
    assert {t.answer_extractor for t in tasks.values()} == {"last_number"}


def test_reasoning_gym_default_instruction_can_be_replaced_or_dropped() -> None:
    pytest.importorskip("reasoning_gym")
    from reinforge.tasks.reasoning_gym_source import DEFAULT_INSTRUCTION

    base = dict(source="reasoning_gym", dataset="chain_sum", train_size=6, eval_size=3)
    default = load_tasks(TaskConfig(**base), seed=0).eval[0]
    question = default.metadata["entry"]["question"]
    assert default.prompt == f"{question}\n\n{DEFAULT_INSTRUCTION}"
    assert source_instruction(TaskConfig(**base)) == DEFAULT_INSTRUCTION
    assert load_tasks(TaskConfig(**base, instruction=""), seed=0).eval[0].prompt == question
    assert load_tasks(TaskConfig(**base, instruction="End with: The answer is N."), seed=0).eval[0].prompt == (
        f"{question}\n\nEnd with: The answer is N."
    )


def user_tasks(cfg, seed):
    return [Task(id=f"u{i}", prompt=f"q{i}", answer=str(i), answer_extractor="boxed") for i in range(6)]


def test_a_users_source_gets_the_settings_and_keeps_its_own_extractor_unless_set() -> None:
    path = f"{__name__}:user_tasks"
    own = load_tasks(TaskConfig(source=path, eval_size=2, instruction="Box it."), seed=0)
    assert {t.answer_extractor for t in own.train + own.eval} == {"boxed"}
    assert all(t.prompt == f"{t.id.replace('u', 'q')}\n\nBox it." for t in own.train + own.eval)
    assert source_instruction(TaskConfig(source=path)) is None  # a user's source writes its prompts whole
    forced = load_tasks(TaskConfig(source=path, eval_size=2, answer_extractor="auto"), seed=0)
    assert {t.answer_extractor for t in forced.train + forced.eval} == {"auto"}


@pytest.mark.parametrize("key", ["system_prompt", "instruction"])
def test_prompt_settings_on_a_game_source_are_refused_before_compute(key: str) -> None:
    with pytest.raises(ConfigError, match=f"task.{key} applies to sources whose tasks are prompts.*remove task.{key}"):
        check_task_config(TaskConfig(source="text_game", **{key: "x"}))


def test_a_question_placeholder_used_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="holds \\{question\\} 2 times"):
        check_task_config(arithmetic(instruction="{question} and {question}"))


def test_an_unknown_extractor_is_a_config_error_listing_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="answer_extractor"):
        load_config("default", ["task.answer_extractor=last"])


def test_the_default_recipe_is_unchanged() -> None:
    cfg = load_config("default")
    assert (cfg.task.system_prompt, cfg.task.instruction, cfg.task.answer_extractor) == (None, None, None)
    splits: TaskSplits = load_tasks(cfg.task.model_copy(update={"train_size": 10, "eval_size": 3}), seed=0)
    task = splits.eval[0]
    assert task.prompt == f"{task.metadata['a']}+{task.metadata['b']}=" and task.verifier == "numeric"
    assert task.answer_extractor == "response"
