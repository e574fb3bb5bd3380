"""An opponent pool on the vLLM engine (marker `vllm`; a vLLM start, a minute on 2 cores): the pool's
frozen members play through a lane of the VllmEngine (each member's weights loaded into the vLLM
process, versioned and verified like a sync) while the policy samples there with the learner's.
The model is `micro` (vLLM's CPU attention has no kernel for nano's head dimension 16)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.engines.vllm_engine import vllm_available
from reinforge.run.pipeline import run_training
from run_records import pool_games
from tests.games.test_opponent_pool import POOL_RUN, RECIPE

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed: pip install 'reinforge[vllm]' (docs/scaling.md, 'vLLM')"),
]


def test_a_pool_run_on_vllm_plays_its_members_there(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_training(load_config(RECIPE, [*POOL_RUN, "model.preset=micro", "engine.type=vllm", f"trainer.output_dir={run}"]))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert [r["pool/newest_step"] for r in rl] == [1.0, 2.0, 3.0]  # snapshots of the learner's weights
    assert sum(r["pool/weight_loads"] for r in rl) >= 1  # members were loaded into vLLM
    assert pool_games(run) > 0  # and played training games there
