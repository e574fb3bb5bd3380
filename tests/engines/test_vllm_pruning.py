"""Rollout pruning on the vLLM engine (marker `vllm`; a few minutes on 2 cores): vLLM samples each
turn in chunks of success_head.check_every tokens, the in-process policy (the same weights version,
synced after every update) gives the success head its logits at each chunk's prefixes, and the
rows it stops leave the loss (reinforge.rollout.pruned_sampling). The model is `micro` (vLLM's CPU
attention has no kernel for nano's head dimension 16)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.engines.vllm_engine import vllm_available
from reinforge.run.pipeline import run_training
from values.test_pruning_everywhere import check_pruned_run

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed: pip install 'reinforge[vllm]' (docs/scaling.md, 'vLLM')"),
]

RUN = [
    "model.preset=micro", "task.train_size=200", "task.eval_size=8", "telemetry.progress=false", "telemetry.tensorboard=false",
    "telemetry.wandb='off'", "sft.steps=0", "engine.type=vllm", "engine.startup_timeout_s=900",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=12", "trainer.steps=3", "eval.every=100",
    "eval.samples=1", "trainer.checkpoint_every=0",
    # A random model's responses contain one of these letters about half the time: every step updates the weights.
    'reward.components=[{name: letters, fn: format, weight: 1.0, params: {pattern: ".*[a-m].*", require_stop: false}}]',
    "success_head.enabled=true", "success_head.prune=true", "success_head.warmup_steps=1", "success_head.check_every=2",
]


def test_pruning_runs_on_vllm(tmp_path: Path, recorded) -> None:
    run = tmp_path / "run"
    run_training(load_config("default", [*RUN, f"trainer.output_dir={run}"]))
    check_pruned_run(run, recorded)
