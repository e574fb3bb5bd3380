"""An opponent pool on a Ray rollout worker: the pool's frozen members play through a lane of the
RayEngine (their weights shipped to the worker, versioned and verified like a sync), beside the
policy's own weights on the same worker. One worker runs the same operations as the in-process
engine, so the run is the in-process pool run, bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_training
from run_records import assert_same_run, pool_games
from tests.games.test_opponent_pool import POOL_RUN, RECIPE

ray = pytest.importorskip("ray")

from reinforge.distributed.ray_cluster import start_ray, stop_ray  # noqa: E402
from deadlines import PROCESS_START_S  # noqa: E402

RAY = ["workers.workers=1", "workers.cpus_per_worker=0.5", "workers.timeout_s=60", f"workers.startup_timeout_s={PROCESS_START_S:g}"]


@pytest.fixture(scope="module")
def ray_session():
    start_ray(None, num_cpus=2)
    yield
    stop_ray()


def test_a_pool_run_on_one_ray_worker_plays_its_members_there_and_equals_in_process(ray_session, tmp_path: Path) -> None:
    runs = {}
    for name, extra in (("local", []), ("ray", RAY)):
        runs[name] = tmp_path / name
        run_training(load_config(RECIPE, [*POOL_RUN, *extra, f"trainer.output_dir={runs[name]}"]))
    rows = [json.loads(line) for line in (runs["ray"] / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["pool/weight_loads"] for r in rows if r["stage"] == "rl") >= 1  # members were loaded on the worker
    assert pool_games(runs["ray"]) > 0  # and played training games there
    assert_same_run(runs["local"], runs["ray"])
