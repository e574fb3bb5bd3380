"""`reinforge config show | validate`: the resolved YAML, and the pre-compute checks without a model."""

from __future__ import annotations

import sys

import pytest
import yaml

from reinforge.cli import main


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
    if "reinforge.trainer.pipeline" in sys.modules:  # it holds its own reference
        monkeypatch.setattr("reinforge.trainer.pipeline.build_tiny_llama", no_model)
    assert main(["config", "validate"]) == 0
    assert capsys.readouterr().out.strip() == "ok: default is valid"
