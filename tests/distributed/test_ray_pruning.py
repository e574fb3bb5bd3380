"""Rollout pruning on Ray rollout workers: the workers sample in chunks, the driver's policy
judges each chunk's prefixes (reinforge.rollout.pruned_sampling), and a run on one worker is bit for
bit the same run as in-process chunked pruning (the same seeds, operations and decisions: tests/run_records.py).
One Ray session (2 CPUs); a random `nano` model with a reward random responses earn about half the time."""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.engines.torch_engine import TorchEngine

ray = pytest.importorskip("ray")

from reinforge.distributed.ray_cluster import start_ray, stop_ray  # noqa: E402
from reinforge.run.pipeline import run_training  # noqa: E402
from run_records import assert_same_run, run_metrics  # noqa: E402

QUIET = ["telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'"]
RUN = [
    "model.preset=nano", "task.train_size=200", "task.eval_size=8", *QUIET, "sft.steps=0",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=12", "trainer.steps=4", "eval.every=100",
    "eval.samples=1", "trainer.checkpoint_every=0",
    'reward.components=[{name: letters, fn: format, weight: 1.0, params: {pattern: ".*[a-m].*", require_stop: false}}]',
    "success_head.enabled=true", "success_head.prune=true", "success_head.warmup_steps=1", "success_head.check_every=2",
]
from distributed.test_ray_pool import RAY  # noqa: E402  (one worker, half a CPU)


@pytest.fixture(scope="module")
def ray_session():
    start_ray(None, num_cpus=2)
    yield
    stop_ray()


def test_pruning_on_one_worker_equals_in_process_chunked_pruning(ray_session, tmp_path: Path, recorded, monkeypatch) -> None:
    run = tmp_path / "ray"
    run_training(load_config("default", [*RUN, *RAY, f"trainer.output_dir={run}"]))
    rl = [r for r in run_metrics(run) if r.get("stage") == "rl"]
    assert sum(r["prune/rollouts"] for r in rl) > 0, "nothing was pruned: the test does not exercise pruning"
    for _, batch in recorded:  # pruned rows leave the loss; every group keeps success_head.min_group_size
        assert all(t.finish_reason != "pruned" for t in batch)
        assert min(sum(t.group_id == g for t in batch) for g in {t.group_id for t in batch}) >= 2

    monkeypatch.setattr(TorchEngine, "supports_decode_hook", False)  # in-process, but checked between chunks as on the worker
    local = tmp_path / "local"
    run_training(load_config("default", [*RUN, f"trainer.output_dir={local}"]))
    assert_same_run(local, run)
