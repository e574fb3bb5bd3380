"""`reinforge config show | validate`: the resolved YAML, and the pre-compute checks without a model."""

from __future__ import annotations

import sys

import pytest
import yaml

from reinforge.cli import config_from_args, main, parse_args


def test_show_prints_resolved_yaml_with_method_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "algo.method=dapo"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["algo"]["method"] == "dapo"
    assert cfg["algo"]["dynamic_sampling"] is True
    assert cfg["rollout"]["max_new_tokens"] == 8  # from recipes/default.yaml


def test_show_with_explicit_recipe_and_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "default", "algo.lr=1e-5"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["algo"]["lr"] == 1e-5


def test_show_reports_unknown_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "algo.lrr=1"]) == 2
    err = capsys.readouterr().err
    assert "algo.lrr" in err and "docs/config.md" in err


def test_validate_rejects_group_of_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", "rollout.group_size=1"]) == 2
    captured = capsys.readouterr()
    assert "rollout.group_size" in captured.err
    assert "ok:" not in captured.out


def test_validate_default_recipe_loads_no_model(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def no_model(*args, **kwargs):
        raise AssertionError("config validate must not build a model")

    monkeypatch.setattr("reinforge.models.tiny_llama.build_tiny_llama", no_model)
    if "reinforge.run.pipeline" in sys.modules:  # it holds its own reference
        monkeypatch.setattr("reinforge.run.pipeline.build_tiny_llama", no_model)
    assert main(["config", "validate"]) == 0
    memory, verdict = capsys.readouterr().out.strip().splitlines()
    assert verdict == "ok: default is valid"
    assert memory.startswith("memory: one RL step is predicted to take")  # the memory-fit preflight, from the config alone


def test_overrides_on_both_sides_of_an_option() -> None:
    args = parse_args(["train", "algo.lr=1e-5", "--model", "/m", "rollout.group_size=4", "--output", "/o", "algo.lr=2e-5"])
    assert args.model == "/m" and args.output == "/o"
    assert args.overrides == ["algo.lr=1e-5", "rollout.group_size=4", "algo.lr=2e-5"]  # command-line order: the last wins
    cfg = config_from_args(args)
    assert cfg.model.path == "/m" and cfg.algo.lr == 2e-5 and cfg.rollout.group_size == 4
    assert parse_args(["eval", "task.eval_size=9", "--model", "/m", "eval.samples=2"]).overrides == ["task.eval_size=9", "eval.samples=2"]


@pytest.mark.parametrize(
    "argv, stray",
    [
        (["train", "a.b=1", "--model", "/m", "--modle", "/x"], "--modle /x"),  # a misspelt option stays an error
        (["train", "a.b=1", "--model", "/m", "oops"], "oops"),  # not KEY=VALUE
        (["report", "runs/x", "algo.lr=1"], "algo.lr=1"),  # report takes no overrides
    ],
)
def test_leftover_arguments_that_are_not_overrides_are_refused(argv: list[str], stray: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    assert f"unrecognized arguments: {stray}" in capsys.readouterr().err


def test_the_recipe_may_come_first_instead_of_recipe(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("rollout: {group_size: 4}\n")
    args = parse_args(["train", str(recipe), "algo.lr=2e-5", "--output", "/o"])
    assert args.recipe == str(recipe) and args.overrides == ["algo.lr=2e-5"]
    cfg = config_from_args(args)
    assert cfg.rollout.group_size == 4 and cfg.algo.lr == 2e-5
    assert parse_args(["sft", "tool-agent"]).recipe == "tool-agent"
    assert parse_args(["train", "algo.lr=1"]).recipe == "default"  # no recipe named: the default one
    with pytest.raises(SystemExit):
        parse_args(["train", str(recipe), "--recipe", "default"])
    assert "two recipes" in capsys.readouterr().err
