"""What a finished run leaves behind, read back for tests that compare two runs.

`assert_same_run(a, b)` is the check behind "exact resume", "k=0 is sync" and "the same run on
other workers": the final weights and every logged metric are the same bits, timings aside.

Bitwise, with no tolerance: these are claims that two runs perform the same float operations in
the same order (the same code, shapes and thread count: a Ray rollout worker runs the engine
with int(cpus_per_worker) >= 1 threads, which the tests keep equal to the in-process engine's
`trainer.threads=1`, and inherits the driver's environment, so the same kernels; torch's CPU
allocator aligns every tensor to 64 bytes, so alignment-dependent BLAS paths agree too), and the
same operations give the same bits on any CPU. Two
runs that add in another order (2 learners vs 1) cannot be compared after several steps with any
fixed tolerance (Adam turns rounding into up to ~lr per weight): they are compared step by step
from identical states instead (tests/teacher_forcing.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file


def is_timing(key: str) -> bool:
    if key.startswith("policy/") and key.count("/") >= 2:  # one of several policies' own (policy/<name>/time/sft)
        key = key.split("/", 2)[2]
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


def assert_same_run(a: Path, b: Path) -> None:
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa), "weights differ"
    assert run_metrics(a) == run_metrics(b)


def pool_games(run_dir: Path) -> int:
    """Games the policy played against opponent-pool members, as the run's last checkpoint counts them."""
    from reinforge.runtime import checkpoint as ckpt

    state = ckpt.load_state(ckpt.list_checkpoints(run_dir)[-1])
    return sum(m["wins"] + m["draws"] + m["losses"] for m in state["env"]["opponent_pool"]["members"])
