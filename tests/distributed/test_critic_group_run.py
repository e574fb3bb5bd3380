"""`reinforge train` with workers.learners=2 replicated learners (workers.sharding=none) and a critic:
the critic is data-parallel like the policy (reinforge.distributed.critic_group; its step is checked
against one process in test_critic_group.py), trains every step, and a run killed at its
checkpoint and resumed is the uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.runtime import checkpoint as ckpt
from run_records import assert_same_run, copy_at_first_checkpoint, run_metrics
from test_sharded_checkpoint import BASE, train

REPLICAS = [arg for arg in BASE if arg != "workers.sharding=fsdp"]


@pytest.mark.slow  # whole runs (~50 s each); .ci/run runs tests/distributed -m slow
def test_a_replicated_run_with_a_critic_trains_it_and_resumes_exactly(tmp_path: Path) -> None:
    full = tmp_path / "full"
    train("--output", str(full), *REPLICAS, "critic.enabled=true", "algo.advantage=gae")
    rl = [r for r in run_metrics(full) if r.get("stage") == "rl"]
    assert len(rl) == 3 and all(r["value_grad_norm"] > 0 for r in rl), "the critic trained every step"
    state = ckpt.load_state(ckpt.list_checkpoints(full)[0])
    assert state["critic"]["optimizer"]["state"], "rank 0's replica holds the critic's AdamW moments, whole"
    copy = tmp_path / "copy"
    copy_at_first_checkpoint(full, copy)
    train("--resume", str(copy))
    assert_same_run(full, copy)
