"""`reinforge train` with workers.learners=2 workers.sharding=fsdp: the loop trains, checkpoints
the whole model and its AdamW state, and a run resumed from its checkpoint is the same run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from deadlines import PROCESS_START_S
from reinforge.runtime import checkpoint as ckpt
from run_records import assert_same_run, copy_at_first_checkpoint, run_metrics

BASE = [
    "model.preset=nano", "task.train_size=100", "task.eval_size=4", "eval.every=100", "eval.samples=1", "sft.steps=150", "sft.lr=0.003",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8", "trainer.steps=3",
    "trainer.checkpoint_every=2", "telemetry.progress=false", "telemetry.tensorboard=false",
    "workers.learners=2", "workers.sharding=fsdp", f"workers.timeout_s={PROCESS_START_S:g}",
]


def train(*args: str) -> None:
    """`reinforge train` in a process of its own: a process that ran FSDP2 as rank 0 keeps a gloo
    socket listening on every interface, which the Ray loopback test would find in pytest's."""
    command = [sys.executable, "-c", "import sys; from reinforge.cli import main; sys.exit(main(sys.argv[1:]))", "train", *args]
    subprocess.run(command, check=True, timeout=3 * PROCESS_START_S)


def test_a_sharded_run_checkpoints_full_state_and_resumes_exactly(tmp_path: Path) -> None:
    full = tmp_path / "full"
    train("--output", str(full), *BASE)
    rl = [r for r in run_metrics(full) if r.get("stage") == "rl"]
    assert len(rl) == 3 and any(r["grad_norm"] > 0 for r in rl)  # a step with signal
    # The step-2 checkpoint holds the whole model's AdamW moments (gathered from both ranks' shards),
    # in the plain optimizer's layout: one full-size moment per parameter of the model.
    state = ckpt.load_state(ckpt.list_checkpoints(full)[0])
    final = AutoModelForCausalLM.from_pretrained(full / "final")  # final/ is a plain Hugging Face model
    moments = state["optimizer"]["state"]
    assert state["learner_version"] == 2
    assert [tuple(moments[i]["exp_avg"].shape) for i in sorted(moments)] == [tuple(p.shape) for p in final.parameters()]
    assert all(torch.count_nonzero(entry["exp_avg_sq"]) > 0 for entry in state["optimizer"]["state"].values())
    copy = tmp_path / "copy"
    copy_at_first_checkpoint(full, copy)
    train("--resume", str(copy))
    assert_same_run(full, copy)
