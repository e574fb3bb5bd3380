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
