"""Run an example of examples/ the way a user would: from its own directory, with the CLI.

The example's directory is copied into the test's temp dir (so nothing, not even __pycache__, is
written into the repository) and `reinforge train recipe.yaml` runs there in a fresh
interpreter, with reinforge importable the way an installed package is and the example's own
modules found only because the recipe names them (no PYTHONPATH entry points at the example).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import reinforge

REPO = Path(reinforge.__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
GENEROUS_S = 600  # a bound on hanging, not a timing
QUIET = ["telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off"]


def source_files(name: str) -> list[str]:
    """The example's files as they are in the repository (to show a run leaves them untouched)."""
    root = EXAMPLES / name
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def run_example(name: str, tmp_path: Path, *overrides: str) -> tuple[Path, subprocess.CompletedProcess]:
    """(run directory, finished process) of `reinforge train recipe.yaml` in a copy of
    examples/`name`; fails the test with the run's stderr when it does not exit 0."""
    before = source_files(name)
    workdir = tmp_path / name
    shutil.copytree(EXAMPLES / name, workdir, ignore=shutil.ignore_patterns("__pycache__"))
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "reinforge.cli", "train", "recipe.yaml", "--output", str(run_dir), *QUIET, *overrides],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=GENEROUS_S,
    )
    assert done.returncode == 0, f"examples/{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    assert source_files(name) == before, f"running examples/{name} wrote into the repository"
    return run_dir, done


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def import_example_file(name: str, module: str):
    """examples/`name`/`module`.py imported in this process, leaving no __pycache__ in the repository."""
    spec = importlib.util.spec_from_file_location(f"example_{name}_{module}", EXAMPLES / name / f"{module}.py")
    imported = importlib.util.module_from_spec(spec)
    writes_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(imported)
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return imported
