"""The GSM8K recipe in docs/datasets.md is a valid config that reads a GSM8K-shaped directory."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from reinforge.config import load_config
from reinforge.tasks.registry import check_task_config, load_tasks

DOC = Path(__file__).resolve().parents[2] / "docs" / "datasets.md"


def test_the_documented_gsm8k_recipe_loads_the_train_and_test_splits(tmp_path: Path, monkeypatch) -> None:
    recipe = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.DOTALL).group(1)
    (tmp_path / "gsm8k.yaml").write_text(recipe)
    folder = tmp_path / "gsm8k" / "main"
    folder.mkdir(parents=True)
    for split, n in (("train", 6), ("test", 2)):
        rows = [{"question": f"{split} question {i}?", "answer": f"{i} + {i} = <<{i}+{i}={2 * i}>>{2 * i}\n#### {2 * i}"} for i in range(n)]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{split}-00000-of-00001.parquet")
    monkeypatch.chdir(tmp_path)  # the recipe's paths are relative to the working directory

    cfg = load_config(str(tmp_path / "gsm8k.yaml"))
    check_task_config(cfg.task)
    splits = load_tasks(cfg.task, seed=0)
    assert [t.prompt for t in splits.train] == [f"train question {i}?" for i in range(6)]
    assert [(t.prompt, t.answer, t.verifier) for t in splits.eval] == [
        ("test question 0?", "0", "numeric"),
        ("test question 1?", "2", "numeric"),
    ]
