"""What a finished run leaves behind, read back for tests that compare two runs.

`assert_same_run(a, b)` is the check behind "exact resume", "k=0 is sync" and "the same run on
other workers": the final weights and every logged metric agree (bitwise with tol=0), timings
aside.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file


def is_timing(key: str) -> bool:
    return key == "time" or key.startswith("time/") or "seconds" in key or key.endswith("per_s")


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "final" / "model.safetensors")


def run_metrics(run_dir: Path) -> list[dict]:
    """Every row of metrics.jsonl, without its timings (which no two runs share)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not is_timing(k)} for r in rows]


def copy_at_first_checkpoint(run_dir: Path, copy_dir: Path) -> Path:
    """A copy of a finished run as it was at its first checkpoint (later checkpoints and the final
    model removed, its config pointing at the copy): resuming it must reproduce `run_dir`."""
    shutil.copytree(run_dir, copy_dir)
    shutil.rmtree(copy_dir / "final")
    for later in sorted((copy_dir / "checkpoints").glob("step_*"))[1:]:
        shutil.rmtree(later)
    config = copy_dir / "config.yaml"
    config.write_text(config.read_text().replace(str(run_dir), str(copy_dir)))
    return config


def assert_same_run(a: Path, b: Path, tol: float = 0.0) -> None:
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys()
    if tol == 0:
        assert all(torch.equal(wa[k], wb[k]) for k in wa), "weights differ"
        assert run_metrics(a) == run_metrics(b)
        return
    assert all(torch.allclose(wa[k], wb[k], atol=tol, rtol=0) for k in wa), "weights differ"
    ma, mb = run_metrics(a), run_metrics(b)
    assert [sorted(r) for r in ma] == [sorted(r) for r in mb]
    for ra, rb in zip(ma, mb):
        for key, value in ra.items():
            assert rb[key] == (pytest.approx(value, abs=tol) if isinstance(value, float) else value), key
