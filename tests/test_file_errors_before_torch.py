"""Mistakes in the files a config names (a missing dataset, a broken model directory) are one-line
errors before torch is imported: each case runs the CLI in a fresh process and reports, at the
moment `main` returns, whether torch had been imported. Before, these errors came from the
preflight, after torch and the task building (20-70 s on a loaded 2-core box)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = (
    "import sys\n"
    "from reinforge import cli\n"
    "code = cli.main(sys.argv[1:])\n"
    "print('torch imported:', 'torch' in sys.modules)\n"
    "sys.exit(code)\n"
)


def model_without_weights(tmp_path: Path) -> Path:
    directory = tmp_path / "no_weights"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    return directory


def model_with_bad_config(tmp_path: Path) -> Path:
    directory = tmp_path / "bad_config"
    directory.mkdir()
    (directory / "config.json").write_text('{"model_type": "llama",\n')
    (directory / "model.safetensors").write_bytes(b"")
    return directory


CASES = [
    ("missing jsonl", ["train", "task.source=jsonl", "task.path={tmp}/none.jsonl"], "task file {tmp}/none.jsonl does not exist"),
    ("missing eval jsonl", ["train", "task.source=jsonl", "task.path={tmp}/tasks.jsonl", "task.eval_path={tmp}/gone.jsonl"],
     "task file {tmp}/gone.jsonl does not exist"),
    ("glob matching nothing", ["sft", "task.source=hf_dataset", "task.path={tmp}/data/*.parquet"],
     "task.path: the pattern {tmp}/data/*.parquet matches no file"),
    ("model without weights", ["train", "--model", "{no_weights}"], "has no weights"),
    ("model with broken config.json", ["train", "model.path={bad_config}"], "config.json:2:1: not valid JSON"),
    ("eval of a missing model", ["eval", "--model", "{tmp}/nowhere"], "is not a local directory"),
]


@pytest.mark.parametrize("argv,expected", [pytest.param(a, e, id=c) for c, a, e in CASES])
def test_a_file_mistake_is_reported_before_torch_is_imported(argv, expected, tmp_path) -> None:
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    names = {"tmp": str(tmp_path), "no_weights": str(model_without_weights(tmp_path)),
             "bad_config": str(model_with_bad_config(tmp_path))}
    filled = [arg.format(**names) for arg in argv] + (["--output", str(tmp_path / "run")] if argv[0] != "eval" else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", PROBE, *filled], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "torch imported: False" in done.stdout, (done.stdout, done.stderr)
    errors = [line for line in done.stderr.strip().splitlines() if line.startswith("reinforge: ")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert expected.format(**names) in errors[0], errors[0]
