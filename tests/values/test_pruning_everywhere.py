"""Rollout pruning beyond the in-process decode loop, end to end on tiny runs: partial rollouts,
multi-turn tool episodes, and tool episodes with SPA turn progress (the Ray and vLLM engines are
tests/distributed/test_ray_pruning.py and tests/engines/test_vllm_pruning.py). In each run rows are
really pruned (prune/rollouts > 0), never trained on, and every trained group keeps at least
success_head.min_group_size rollouts.

The heads start from a random `nano` model with a reward random responses earn about half the
time; the head trains from step 1 (warmup_steps=1) and prunes from step 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_sft_stage, run_training
from run_records import assert_same_run, copy_at_first_checkpoint, run_metrics

QUIET = ["telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'"]
TINY = [
    "model.preset=nano", "task.train_size=200", "task.eval_size=8", *QUIET, "eval.every=100", "eval.samples=1",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=12", "trainer.steps=4", "trainer.checkpoint_every=0",
]
PRUNE = ["success_head.enabled=true", "success_head.prune=true", "success_head.warmup_steps=1", "success_head.check_every=2", "success_head.min_group_size=2"]
LETTERS = ['reward.components=[{name: letters, fn: format, weight: 1.0, params: {pattern: ".*[a-m].*", require_stop: false}}]']


def check_pruned_run(run_dir: Path, recorded, group_size: int = 4, minimum: int = 2) -> list[dict]:
    rl = [r for r in run_metrics(run_dir) if r.get("stage") == "rl"]
    assert rl[0]["prune/active"] == 0.0 and all(r["prune/active"] == 1.0 for r in rl[1:])
    assert sum(r["prune/rollouts"] for r in rl) > 0, "nothing was pruned: the test does not exercise pruning"
    for (_, batch), row in zip(recorded, rl):
        sizes: dict[int, int] = {}
        for t in batch:
            assert t.finish_reason != "pruned"
            sizes[t.group_id] = sizes.get(t.group_id, 0) + 1
        assert minimum <= min(sizes.values()) and max(sizes.values()) <= group_size
        assert row["prune/rollouts"] == len(sizes) * group_size - len(batch)  # every row not trained was pruned
    return rl


def test_partial_rollouts_prune_at_chunk_boundaries_and_resume_exactly(tmp_path: Path, recorded) -> None:
    run = tmp_path / "run"
    run_training(load_config("default", [
        *TINY, *PRUNE, *LETTERS, "sft.steps=0", "trainer.partial_rollouts=true", "trainer.overprovision=2.0",
        "trainer.max_staleness=1", "algo.tis_cap=2.0", f"trainer.output_dir={run}", "trainer.checkpoint_every=2",
    ]))
    rl = check_pruned_run(run, recorded)
    assert sum(r["partial_aborted"] for r in rl) > 0  # the rounds really stopped early too
    assert rl[1]["partial_carried_groups"] > 0  # the step-2 checkpoint holds groups in flight (pruned rows among them or not)
    copy = tmp_path / "copy"
    run_training(load_config(str(copy_at_first_checkpoint(run, copy))), resume=True)
    assert_same_run(run, copy)


# Tool episodes: a warm start that imitates calculator traces only, so most episodes take two turns
# (the call, then the answer after the tool's result), rewarded by the product's verifier.
TOOL = ["task.params={op: '*', digits: 3, digits_b: 2, tool_traces: 1.0}", "rollout.max_new_tokens=16"]


@pytest.fixture(scope="module")
def tool_warm_start(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("sft") / "run"
    return run_sft_stage(load_config("tool-agent", [*TINY, *TOOL, "sft.steps=150", "sft.lr=0.003", "sft.batch_size=16", f"trainer.output_dir={run}"]))


@pytest.mark.parametrize("extra", [
    pytest.param([], id="tools"),
    pytest.param(["progress.enabled=true", "algo.advantage=turn_rloo"], id="tools+progress"),
    pytest.param(["trainer.partial_rollouts=true", "trainer.overprovision=2.0", "trainer.max_staleness=1", "algo.tis_cap=2.0"], id="tools+partial"),
])
def test_multi_turn_tool_episodes_are_pruned_in_any_turn(tool_warm_start: Path, tmp_path: Path, recorded, extra) -> None:
    run = tmp_path / "run"
    run_training(load_config("tool-agent", [
        *TINY, *TOOL, *PRUNE, *extra, f"model.path={tool_warm_start}", "sft.steps=0", f"trainer.output_dir={run}",
    ]))
    rl = check_pruned_run(run, recorded)
    assert any(t.num_turns > 1 for _, batch in recorded for t in batch), "no episode took two turns: not a multi-turn run"
    if "progress.enabled=true" in extra:  # SPA's estimator trained on every step and set per-turn rewards on the trained episodes only
        assert all("progress/loss" in r for r in rl)
        assert all(t.turn_rewards is not None and len(t.turn_rewards) == t.num_turns for _, batch in recorded for t in batch)
