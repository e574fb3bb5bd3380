"""`reinforge train --model` gets a pretrained model's lr, response budget and prompt format where
the user did not choose them, and says so."""

from __future__ import annotations

import json

import pytest

from reinforge import cli
from reinforge.config import dump_config, load_config


def model_dir(tmp_path, context=8192):
    path = tmp_path / "model"
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": context}))
    return path


def train_config(*argv):
    return cli.config_from_args(cli.parse_args(["train", *argv]))


def test_the_recipes_tiny_model_settings_give_way_and_the_log_says_so(tmp_path, capsys) -> None:
    recipe = load_config("default")
    assert (recipe.algo.lr, recipe.rollout.max_new_tokens, recipe.rollout.prompt_format) == (2e-4, 8, "raw")
    cfg = train_config("--model", str(model_dir(tmp_path)))
    assert (cfg.algo.lr, cfg.rollout.max_new_tokens, cfg.rollout.prompt_format) == (1e-5, 128, "auto")
    assert cfg.task.answer_extractor == "auto"
    said = capsys.readouterr().out
    assert "--model: using pretrained-model defaults: algo.lr=1e-05 (recipe: 0.0002)" in said
    assert "rollout.max_new_tokens=128 (recipe: 8)" in said and "rollout.prompt_format=auto (recipe: raw)" in said
    assert "override with e.g. algo.lr=..." in said


def test_what_the_user_set_stays(tmp_path, capsys) -> None:
    cfg = train_config("algo.lr=3e-5", "--model", str(model_dir(tmp_path)), "rollout.prompt_format=raw")
    assert (cfg.algo.lr, cfg.rollout.max_new_tokens, cfg.rollout.prompt_format) == (3e-5, 128, "raw")
    said = capsys.readouterr().out
    assert "algo.lr" not in said and "prompt_format" not in said and "rollout.max_new_tokens=128" in said
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("algo:\n  lr: 0.0005\nrollout:\n  max_new_tokens: 16\n")
    cfg = train_config(str(recipe), "--model", str(model_dir(tmp_path)))
    assert (cfg.algo.lr, cfg.rollout.max_new_tokens, cfg.rollout.prompt_format) == (5e-4, 16, "auto")


def test_the_response_budget_leaves_half_a_small_context_to_the_prompt(tmp_path) -> None:
    assert train_config("--model", str(model_dir(tmp_path, context=128))).rollout.max_new_tokens == 64


def test_a_model_saved_by_a_run_keeps_that_runs_settings(tmp_path, capsys) -> None:
    warm = tmp_path / "toy" / "warm_start"  # the default recipe's warm start: raw prompts, 8 tokens
    warm.mkdir(parents=True)
    (warm.parent / "config.yaml").write_text(dump_config(load_config("default")))
    cfg = train_config("--model", str(warm))
    assert (cfg.algo.lr, cfg.rollout.max_new_tokens, cfg.rollout.prompt_format) == (2e-4, 8, "raw")
    assert "--model" not in capsys.readouterr().out  # nothing changed, nothing said
    tuned = tmp_path / "smol" / "checkpoints" / "step_000010" / "model"  # a pretrained model's run, three levels up
    tuned.mkdir(parents=True)
    (tmp_path / "smol" / "config.yaml").write_text(dump_config(load_config(
        "default", ["algo.lr=1e-5", "rollout.max_new_tokens=200", "rollout.prompt_format=chat"])))
    cfg = train_config("--model", str(tuned), "rollout.max_new_tokens=64")
    assert (cfg.algo.lr, cfg.rollout.max_new_tokens, cfg.rollout.prompt_format) == (1e-5, 64, "chat")
    said = capsys.readouterr().out
    assert f"--model: using the values of the run that saved it ({tmp_path / 'smol' / 'config.yaml'})" in said
    assert "algo.lr=1e-05 (recipe: 0.0002)" in said and "max_new_tokens" not in said


@pytest.mark.parametrize("argv", [["train"], ["sft", "--model", "/m"]])
def test_without_train_model_nothing_changes(argv, capsys) -> None:
    cfg = cli.config_from_args(cli.parse_args(argv))
    assert (cfg.algo.lr, cfg.rollout.max_new_tokens, cfg.rollout.prompt_format) == (2e-4, 8, "raw")
    assert "pretrained-model defaults" not in capsys.readouterr().out


def test_the_python_api_applies_them_too(tmp_path, monkeypatch, capsys) -> None:
    import reinforge.run.pipeline as pipeline
    from reinforge.api import train as api_train

    seen = []
    monkeypatch.setattr(pipeline, "run_training", lambda cfg, **kw: seen.append(cfg) or (_ for _ in ()).throw(SystemExit))
    with pytest.raises(SystemExit):
        api_train.train(model=model_dir(tmp_path), overrides={"algo.lr": 2e-5})
    (cfg,) = seen
    assert (cfg.algo.lr, cfg.rollout.max_new_tokens, cfg.rollout.prompt_format) == (2e-5, 128, "auto")
    assert "train(model=...): using pretrained-model defaults: rollout.max_new_tokens=128" in capsys.readouterr().out
