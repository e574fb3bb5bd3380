"""Several policies on Ray rollout workers (the describer-guesser recipe, workers.workers=1): each
policy samples its own seats on a Ray worker of its own, loaded with its own weights after every
update, and the run is the in-process run bit for bit (slow: `pytest -m slow`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from reinforge.run.pipeline import run_training
from deadlines import PROCESS_START_S
from run_records import run_metrics
from test_several_policies import MICRO, config
from test_several_policies_parts import NAMES, rl_rows

ray = pytest.importorskip("ray")

from reinforge.distributed import ray_engine  # noqa: E402
from reinforge.distributed.ray_cluster import start_ray, stop_ray  # noqa: E402

pytestmark = pytest.mark.slow


def weights(run_dir: Path, *where: str) -> dict[str, torch.Tensor]:
    return load_file(run_dir.joinpath(*where, "model.safetensors"))


def test_two_policies_on_ray_workers_are_the_in_process_run(tmp_path: Path, monkeypatch) -> None:
    local, remote = tmp_path / "local", tmp_path / "ray"
    run_training(config(*MICRO, f"trainer.output_dir={local}"))
    workers: list[list[int]] = []  # each engine's worker processes, as it starts
    original = ray_engine.RayEngine.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        workers.append(self.worker_pids())

    monkeypatch.setattr(ray_engine.RayEngine, "__init__", spy)
    start_ray(None, num_cpus=2)
    try:
        # Threads: a worker runs its engine with int(cpus_per_worker) >= 1 threads, the in-process engine's trainer.threads=1.
        run_training(config(*MICRO, "workers.workers=1", "workers.cpus_per_worker=0.5", "workers.timeout_s=300",
                            f"workers.startup_timeout_s={PROCESS_START_S:g}", f"trainer.output_dir={remote}"))
        assert len(workers) == 2 and len({pid for pids in workers for pid in pids}) == 2  # a worker of its own per policy
    finally:
        stop_ray()
    for name in NAMES:
        final = weights(remote, "final", name)
        assert all(torch.equal(final[k], v) for k, v in weights(local, "final", name).items()), f"{name}: weights differ"
        warm = weights(remote, "warm_start", name)
        assert any(not torch.equal(final[k], v) for k, v in warm.items()), f"{name} did not train"
        assert all(f"policy/{name}/loss" in r and f"policy/{name}/policy_version" in r for r in rl_rows(remote))
    # Every metric, each policy's included: the same games sampled with each owner's weights.
    assert run_metrics(local) == run_metrics(remote)
