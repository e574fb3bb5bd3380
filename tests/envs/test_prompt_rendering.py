"""The recipe's system prompt and instruction, rendered through a chat template into prompt tokens;
prompt formats that cannot hold them refused before any model is loaded."""

from __future__ import annotations

import copy

import pytest

from reinforge.cli import main
from reinforge.config import ConfigError, load_config
from reinforge.run.env_factory import build_env
from reinforge.envs.single_turn import PromptFormatError, SingleTurnEnv
from reinforge.models.loading import save_model
from reinforge.run.task_fit import check_tasks_fit
from reinforge.tasks.registry import load_tasks

SYSTEM = "Be brief."
TASK = ["task.params.digits=1", "task.train_size=20", "task.eval_size=3"]


def test_system_prompt_and_instruction_render_through_the_tiny_chat_template(tokenizer) -> None:
    cfg = load_config("default", [*TASK, "rollout.prompt_format=chat", f"task.system_prompt='{SYSTEM}'", "task.instruction='What is {question}?'"])
    task = load_tasks(cfg.task, seed=0).eval[0]
    question = f"{task.metadata['a']}+{task.metadata['b']}="
    env = build_env(cfg, tokenizer)
    ids = env.prompt_ids(task)
    assert tokenizer.decode(ids) == f"<bos><|system|>{SYSTEM}<|end|><|user|>What is {question}?<|end|><|assistant|>"
    # the template's role markers are single tokens, and the policy's turn will stop on <|end|>
    assert tokenizer.convert_ids_to_tokens(ids)[:2] == ["<bos>", "<|system|>"] and env.stop_token_ids[0] == env.end_of_response_id


def test_without_a_system_prompt_the_prompt_has_only_the_user_turn(tokenizer) -> None:
    cfg = load_config("default", [*TASK, "rollout.prompt_format=chat", "task.instruction='Be brief.'"])
    task = load_tasks(cfg.task, seed=0).eval[0]
    text = tokenizer.decode(build_env(cfg, tokenizer).prompt_ids(task))
    assert text == f"<bos><|user|>{task.prompt}<|end|><|assistant|>" and task.prompt.endswith("=\n\nBe brief.")


def test_the_default_recipes_raw_prompt_is_unchanged(tokenizer) -> None:
    cfg = load_config("default", TASK)
    task = load_tasks(cfg.task, seed=0).eval[0]
    env = build_env(cfg, tokenizer)
    assert env.prompt_format == "raw" and env.prompt_ids(task) == tokenizer(f"{task.metadata['a']}+{task.metadata['b']}=").input_ids


def test_a_system_prompt_under_raw_format_is_refused_before_any_model(tokenizer) -> None:
    cfg = load_config("default", [*TASK, f"task.system_prompt='{SYSTEM}'"])  # the default recipe is raw
    tasks = load_tasks(cfg.task, seed=0)
    with pytest.raises(PromptFormatError, match="task.system_prompt.*rollout.prompt_format=raw"):
        SingleTurnEnv(tokenizer, "raw").prompt_ids(tasks.eval[0])
    with pytest.raises(ConfigError, match="rollout.prompt_format: .*remove task.system_prompt"):
        check_tasks_fit(cfg, tasks)  # what train / config validate run before building the model


@pytest.fixture()
def no_template_dir(tmp_path, nano_model, tokenizer):
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = None
    return save_model(nano_model, plain, tmp_path / "model")


def test_chat_format_without_a_chat_template_is_refused_with_the_fix(no_template_dir, tokenizer) -> None:
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = None
    with pytest.raises(ConfigError, match="no chat template.*rollout.prompt_format=raw.*tokenizer.chat_template"):
        build_env(load_config("default", ["rollout.prompt_format=chat"]), plain)
    cfg = load_config("default", [*TASK, "rollout.prompt_format=chat", f"model.path={no_template_dir}"])
    with pytest.raises(ConfigError, match="no chat template"):
        check_tasks_fit(cfg, load_tasks(cfg.task, seed=0))


def test_reinforge_eval_refuses_it_before_loading_the_weights(no_template_dir, tmp_path, monkeypatch, capsys) -> None:
    from reinforge.run import eval_command

    def no_load(*args, **kwargs):
        raise AssertionError("the weights were loaded before the prompt format was checked")

    monkeypatch.setattr(eval_command, "load_model_and_tokenizer", no_load)
    code = main(["eval", "--model", str(no_template_dir), "--output", str(tmp_path / "out"), *TASK, "rollout.prompt_format=chat"])
    assert code == 2 and "no chat template" in capsys.readouterr().err
