"""A sharded run of the real model: recipes/smollm2.yaml (SmolLM2-135M-Instruct: 30 layers, tied
49,152-token embedding) for 2 steps with workers.learners=2 workers.sharding=fsdp, shortened to 4
samples of 8 tokens a step. Marked `real_model`:
`python -m pytest -q -m real_model tests/distributed/test_sharded_real_model.py`."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from deadlines import PROCESS_START_S
from run_records import run_metrics

pytestmark = pytest.mark.real_model


def test_smollm2_trains_two_sharded_steps(real_model_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    command = [
        sys.executable, "-c", "import sys; from reinforge.cli import main; sys.exit(main(sys.argv[1:]))", "train", "smollm2",
        f"model.path={real_model_dir}", "--output", str(run), "trainer.steps=2", "trainer.checkpoint_every=100",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8",
        "task.eval_size=2", "eval.every=100", "telemetry.progress=false", "telemetry.tensorboard=false",
        "algo.entropy_coef=0.001",  # a gradient even when every sample of a group scores alike
        "workers.learners=2", "workers.sharding=fsdp", f"workers.timeout_s={PROCESS_START_S:g}",
    ]
    # A process of its own: one that ran FSDP2 as rank 0 keeps a gloo socket listening (test_ray_workers).
    subprocess.run(command, check=True, timeout=3 * PROCESS_START_S)
    rl = [r for r in run_metrics(run) if r.get("stage") == "rl"]
    assert len(rl) == 2 and all(math.isfinite(r["grad_norm"]) for r in rl)
    assert rl[-1]["policy_version"] == 2  # both sharded optimizer steps were taken
    # final/ is the whole model gathered from the two ranks' shards, a plain Hugging Face model, moved by the steps.
    before = AutoModelForCausalLM.from_pretrained(real_model_dir, dtype=torch.float32)
    after = AutoModelForCausalLM.from_pretrained(run / "final", dtype=torch.float32)
    assert after.get_output_embeddings().weight is after.get_input_embeddings().weight  # still tied
    moved = max((a - b).abs().max().item() for a, b in zip(after.parameters(), before.parameters()))
    assert moved > 0
