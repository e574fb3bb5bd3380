"""`reinforge compare`: every method x seed runs from one warm start; plot and tables are written."""

from __future__ import annotations

import json

from reinforge.cli import main

TINY = [
    "model.preset=nano", "task.train_size=64", "task.eval_size=8", "sft.steps=3", "rollout.prompts_per_step=2",
    "rollout.group_size=2", "trainer.steps=2", "eval.every=1", "eval.samples=1",
]


def test_compare_writes_plot_and_tables(tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", *TINY, "--algos", "grpo,rloo", "--seeds", "2", "--output", str(out)]) == 0
    png = (out / "learning_curves.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    runs = json.loads((out / "results.json").read_text())
    assert sorted((r["method"], r["seed"]) for r in runs) == [("grpo", 0), ("grpo", 1), ("rloo", 0), ("rloo", 1)]
    # All runs start RL from the same warm start, so they agree on the starting accuracy.
    assert len({r["accuracy_start"] for r in runs}) == 1
    assert [len(r["accuracy_curve"]) for r in runs] == [3] * 4  # evaluation at steps 0, 1, 2
    table = (out / "results.md").read_text().splitlines()
    assert table[0].startswith("| method |") and [row.split("|")[1].strip() for row in table[2:]] == ["grpo", "rloo"]


def test_compare_rejects_unknown_methods_before_compute(tmp_path, capsys):
    assert main(["compare", "--algos", "grpo,nope", "--output", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'nope'" in err and "dr_grpo" in err
    assert not (tmp_path / "c").exists()


def test_compare_runs_variants_mixed_with_methods(tmp_path, capsys):
    """A variant is a named list of overrides; it runs beside methods and labels its results."""
    out = tmp_path / "cmp"
    reward = [
        "reward.components=[{name: correct, fn: verifier}, {name: short, fn: format, params: {pattern: '[0-9]{1,2}'}}]"
    ]
    gated = "gated=reward.gates=[{part: short, requires: correct, threshold: 1}];algo.lr=0.0001"
    assert main(["compare", *TINY, *reward, "--algos", "gdpo", "--variants", "sum=", "--variants", gated,
                 "--seeds", "1", "--output", str(out)]) == 0
    runs = json.loads((out / "results.json").read_text())
    assert [r["method"] for r in runs] == ["gdpo", "sum", "gated"]
    assert len({r["accuracy_start"] for r in runs}) == 1
    assert all(set(r["reward_parts"]) == {"correct", "short"} for r in runs)
    gated_cfg = (out / "gated" / "seed0" / "config.yaml").read_text()
    assert "requires: correct" in gated_cfg and "0.0001" in gated_cfg
    table = (out / "results.md").read_text().splitlines()
    assert table[0].startswith("| variant |") and "train short" in table[0]
    assert [row.split("|")[1].strip() for row in table[2:]] == ["gdpo", "sum", "gated"]


def test_compare_variants_from_yaml_and_bad_variants(tmp_path, capsys):
    from reinforge.run.compare import parse_variants

    spec = tmp_path / "variants.yaml"
    spec.write_text("plain:\nslow: ['algo.lr=1e-5', 'rollout.temperature=0.5']\n")
    assert parse_variants([str(spec), "fast=algo.lr=1e-3"]) == {
        "plain": [], "slow": ["algo.lr=1e-5", "rollout.temperature=0.5"], "fast": ["algo.lr=1e-3"]
    }
    # Errors are config errors, reported before any compute.
    assert main(["compare", "--variants", "a=algo.lr=1", "--variants", "a=", "--output", str(tmp_path / "c")]) == 2
    assert "given twice" in capsys.readouterr().err
    assert main(["compare", "--algos", "grpo", "--variants", "grpo=algo.lr=1", "--output", str(tmp_path / "c")]) == 2
    assert "also a method" in capsys.readouterr().err
    assert main(["compare", "--variants", "x=algo.nope=1", "--output", str(tmp_path / "c")]) == 2
    assert "x:" in capsys.readouterr().err
    assert main(["compare", "--output", str(tmp_path / "c")]) == 2
    assert "nothing to compare" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
