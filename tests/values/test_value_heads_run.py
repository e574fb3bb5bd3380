"""A tiny run with the success head pruning and voting: it prunes, never below the group minimum,
counts what it pruned, and resumes exactly from a checkpoint (heads, buffers and generators in it).
Slow (a warm start and two short runs, ~40 s on a shared core): run with -m slow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.eval_command import run_eval
from reinforge.run.pipeline import run_sft_stage, run_training
from run_records import assert_same_run, copy_at_first_checkpoint

pytestmark = pytest.mark.slow

QUIET = ["telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'"]
TINY = [
    "model.preset=nano", "task.train_size=200", "task.eval_size=16", *QUIET,
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=12",
    "trainer.steps=6", "eval.every=3", "eval.samples=3",
]
HEADS = ["success_head.enabled=true", "success_head.prune=true", "success_head.warmup_steps=1", "success_head.check_every=2", "success_head.min_group_size=3"]


def test_pruned_run_resumes_exactly(tmp_path: Path, recorded) -> None:
    warm = run_sft_stage(load_config("default", [*TINY, "sft.steps=150", "sft.lr=0.003", "sft.warmup_steps=50", f"trainer.output_dir={tmp_path / 'sft'}"]))
    full = tmp_path / "full"
    run_training(load_config("default", [*TINY, *HEADS, f"model.path={warm}", "sft.steps=0", f"trainer.output_dir={full}", "trainer.checkpoint_every=3"]))
    rows = [json.loads(line) for line in (full / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert sum(r["prune/rollouts"] for r in rl) > 0 and rl[0]["prune/active"] == 0.0
    assert any("value_vote@3" in r for r in rows if r["stage"] == "eval")
    for _, batch in recorded:  # every trained group keeps at least success_head.min_group_size rollouts
        sizes: dict[int, int] = {}
        for t in batch:
            assert t.finish_reason != "pruned"
            sizes[t.group_id] = sizes.get(t.group_id, 0) + 1
        assert min(sizes.values()) >= 3

    # `reinforge eval` on the final model reads the head from the last checkpoint and votes with it.
    report = run_eval(load_config(str(full / "config.yaml"), [f"model.path={full / 'final'}"]), tmp_path / "eval")
    assert set(report["voting"]) == {"majority@3", "value_best@3", "value_vote@3"}

    copy = tmp_path / "copy"
    run_training(load_config(str(copy_at_first_checkpoint(full, copy))), resume=True)
    assert_same_run(full, copy)
