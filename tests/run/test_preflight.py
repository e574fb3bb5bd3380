"""Preflight: every config that cannot run fails with its key named, before any model exists.

These tests stay pure calls on configs: no tokenizer is trained and no model is built (model
factories are patched to fail, which is what "before any compute" means here; no wall-clock
limits, which a loaded machine would make flaky).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge import cli
from reinforge.config import ConfigError, load_config
from reinforge.run import pipeline, task_fit
from reinforge.run.preflight import preflight

@pytest.fixture(autouse=True)
def no_compute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Anything past validation is a test failure, and nothing lands in the repo's runs/."""

    def forbidden(*args, **kwargs):
        raise AssertionError("work started before the config was validated")

    for name in ("build_policy", "load_tasks", "make_run_dir", "build_tiny_llama", "load_model_and_tokenizer"):
        monkeypatch.setattr(pipeline, name, forbidden)
    monkeypatch.setattr(task_fit, "train_tokenizer", forbidden)
    monkeypatch.chdir(tmp_path)


def check(*overrides: str) -> None:
    preflight(load_config("default", list(overrides)))


def config_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        check(*overrides)
    return str(err.value)


def test_default_recipe_passes() -> None:
    check()


def test_group_of_one_for_grpo() -> None:
    message = config_error("rollout.group_size=1")
    assert "rollout.group_size=1" in message and "'grpo'" in message and ">= 2" in message


def test_mini_batches_must_divide_the_samples() -> None:
    # default: 32 prompts x 8 samples = 256 per step
    message = config_error("algo.mini_batches=3")
    assert "algo.mini_batches=3" in message and "256" in message
    check("algo.mini_batches=4")


def test_unknown_advantage_lists_valid_ones() -> None:
    message = config_error("algo.advantage=ppo_gae_typo")
    assert "algo.advantage" in message and "'ppo_gae_typo'" in message and "grpo" in message


def test_unknown_task_source() -> None:
    message = config_error("task.source=csv")
    assert "task.source" in message and "'csv'" in message and "arithmetic" in message


def test_bad_arithmetic_params() -> None:
    assert "task.params" in config_error("task.params.digts=2")
    assert "task.params.digits" in config_error("task.params.digits=12")


def test_unknown_reasoning_gym_dataset() -> None:
    message = config_error("task.source=reasoning_gym", "task.dataset=nope", "task.params={}")
    assert "task.dataset" in message and "'nope'" in message and "chain_sum" in message


def test_reasoning_gym_without_dataset() -> None:
    assert "task.dataset" in config_error("task.source=reasoning_gym", "task.params={}")


def test_bad_reward_fn_name() -> None:
    message = config_error("reward.components=[{name: score, fn: verifer}]")
    assert "reward.components[0]" in message and "'verifer'" in message and "verifier" in message


def test_bad_reward_params() -> None:
    message = config_error("reward.components=[{name: a, fn: verifier}, {name: fmt, fn: format, params: {patern: x}}]")
    assert "reward.components[1]" in message and "fmt" in message and "bad params" in message
    assert "invalid regex" in config_error("reward.components=[{name: fmt, fn: format, params: {pattern: '('}}]")


def test_missing_model_dir_mentions_hub(tmp_path: Path) -> None:
    message = config_error(f"model.path={tmp_path / 'nonexistent'}")
    assert "model.path" in message and "a .gguf file, a Hub id (org/name)" in message


def test_model_dir_without_config_json(tmp_path: Path) -> None:
    (tmp_path / "not_a_model").mkdir()
    message = config_error(f"model.path={tmp_path / 'not_a_model'}")
    assert "model.path" in message and "config.json" in message


def test_model_dir_problems_name_model_path(tmp_path: Path, tokenizer, nano_model) -> None:
    from transformers import BertConfig, BertModel

    from reinforge.models.loading import save_model

    good = save_model(nano_model, tokenizer, tmp_path / "good")
    check(f"model.path={good}", "sft.steps=0")
    bert = tmp_path / "bert"
    BertModel(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)).save_pretrained(bert)
    (bert / "tokenizer.json").write_bytes((good / "tokenizer.json").read_bytes())
    message = config_error(f"model.path={bert}")
    assert message.startswith("model.path:") and "BertModel" in message and "not a causal language model" in message
    (good / "model.safetensors").unlink()
    message = config_error(f"model.path={good}")
    assert message.startswith("model.path:") and "has no weights" in message


def test_unknown_model_preset() -> None:
    message = config_error("model.preset=gigantic")
    assert "model.preset" in message and "'gigantic'" in message


def test_non_empty_output_dir(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    check(f"trainer.output_dir={out}")  # empty: fine
    check(f"trainer.output_dir={tmp_path / 'new'}")  # absent: fine
    (out / "metrics.jsonl").write_text("{}\n")
    message = config_error(f"trainer.output_dir={out}")
    assert "trainer.output_dir" in message and str(out) in message


# --------------------------------------------------------------------------- the CLI


def test_cli_group_of_one_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "rollout.group_size=1"]) == 2
    captured = capsys.readouterr()
    assert "rollout.group_size" in captured.err
    assert captured.err.startswith("reinforge: config error:")
    assert captured.out == ""


def test_cli_missing_model_says_what_was_expected(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["train", "--model", "/nonexistent"]) == 2
    err = capsys.readouterr().err
    assert "model.path" in err and "/nonexistent" in err and "a Hub id (org/name)" in err


def test_cli_schema_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["sft", "algo.lrr=1"]) == 2
    assert "algo.lrr" in capsys.readouterr().err
    assert cli.main(["train", "--recipe", "nope"]) == 2
    assert "shipped recipes" in capsys.readouterr().err


def test_cli_non_empty_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    assert cli.main(["train", "--output", str(tmp_path / "out")]) == 2
    assert "trainer.output_dir" in capsys.readouterr().err


def test_cli_model_flag_skips_warm_up() -> None:
    args = cli._parser().parse_args(["train", "--model", "/m", "algo.lr=1e-5"])
    cfg = cli.config_from_args(args)
    assert cfg.model.path == "/m" and cfg.sft.steps == 0 and cfg.algo.lr == 1e-5
    kept = cli.config_from_args(cli._parser().parse_args(["train", "--model", "/m", "sft.steps=7"]))
    assert kept.sft.steps == 7
