"""LoRA through the other weight paths (slow: `pytest -m slow`): the async schedule's private engine
and a Ray rollout worker both receive merged weights, and reproduce the in-process sync run bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("peft", reason="LoRA needs the peft package: pip install 'reinforge[lora]'")

from reinforge.config import load_config  # noqa: E402
from reinforge.run.pipeline import run_training  # noqa: E402
from run_records import assert_same_run, run_metrics  # noqa: E402

pytestmark = pytest.mark.slow

RUN = [
    "model.preset=nano", "task.train_size=200", "task.eval_size=16", "sft.steps=0", "telemetry.progress=false",
    "telemetry.tensorboard=false", "telemetry.wandb='off'", "rollout.prompts_per_step=4", "rollout.group_size=4",
    "rollout.max_new_tokens=12", "trainer.steps=3", "eval.every=2", "eval.samples=2", "algo.lr=0.01",
    "model.lora={r: 4, alpha: 8}",
    'reward.components=[{name: letters, fn: format, weight: 1.0, params: {pattern: ".*[a-m].*", require_stop: false}}]',
]


def train(run_dir: Path, *overrides: str):
    return run_training(load_config("default", [*RUN, f"trainer.output_dir={run_dir}", *overrides]))


@pytest.fixture(scope="module")
def sync_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("sync") / "run"
    train(run)
    assert len({r["reward"] for r in run_metrics(run) if "reward" in r}) > 1  # the adapters really learn
    return run


def test_async_k0_with_lora_is_sync(sync_run: Path, tmp_path: Path) -> None:
    train(tmp_path / "k0", "trainer.schedule=async", "trainer.max_staleness=0")
    assert_same_run(sync_run, tmp_path / "k0")


def test_a_ray_worker_samples_the_merged_weights(sync_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from reinforge.distributed.ray_cluster import start_ray, stop_ray

    start_ray(None, num_cpus=2)
    try:
        train(tmp_path / "ray", "workers.workers=1", "workers.cpus_per_worker=0.5", "workers.timeout_s=300")  # a worker imports torch and transformers first
    finally:
        stop_ray()
    assert_same_run(sync_run, tmp_path / "ray")
