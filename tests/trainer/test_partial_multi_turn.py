"""Partial rollouts of multi-turn episodes (the tool env) end to end on a tiny run: episodes span
steps mid-turn and between turns, carry tokens of several policy versions within the staleness
bound, and a run resumed from a checkpoint taken with episodes in flight is the uninterrupted run.

The warm start imitates calculator traces only, so most episodes take two turns (the call, then
the answer after the tool's result) and a step's budget often ends between them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_sft_stage, run_training
from run_records import assert_same_run, copy_at_first_checkpoint

QUIET = ["telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'"]
TINY = [
    "model.preset=nano", "task.train_size=200", "task.eval_size=8", *QUIET,
    "task.params={op: '*', digits: 3, digits_b: 2, tool_traces: 1.0}",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=16",
    "trainer.steps=6", "eval.every=100", "eval.samples=1", "trainer.checkpoint_every=0",
]
PARTIAL = ["trainer.partial_rollouts=true", "trainer.overprovision=2.0", "algo.tis_cap=2.0"]


@pytest.fixture(scope="module")
def warm_start(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("sft") / "run"
    return run_sft_stage(load_config("tool-agent", [*TINY, "sft.steps=150", "sft.lr=0.003", "sft.batch_size=16", f"trainer.output_dir={run}"]))


def train(warm_start: Path, run_dir: Path, *overrides: str):
    cfg = load_config("tool-agent", [*TINY, f"model.path={warm_start}", "sft.steps=0", f"trainer.output_dir={run_dir}", *overrides])
    return run_training(cfg)


def sampled_versions(t) -> list[int]:
    return [v for v, sampled in zip(t.token_versions, t.loss_mask) if sampled]


def between_turns(turn_versions: list[set[int]]) -> bool:
    """A turn sampled wholly by newer weights than the turn before it: resumed at a turn boundary."""
    return any(max(a) < min(b) for a, b in zip(turn_versions, turn_versions[1:]))


# sync: step s samples with the weights of step s-1 (k=1); async with k=2: lag 1, those of step s-2
@pytest.mark.parametrize("schedule, k, lag", [("sync", 1, 0), ("async", 2, 1)])
def test_tool_episodes_resume_across_steps_and_resume_exactly(warm_start: Path, tmp_path: Path, recorded, schedule, k, lag) -> None:
    full = tmp_path / "full"
    outcome = train(
        warm_start, full, *PARTIAL, f"trainer.schedule={schedule}", f"trainer.max_staleness={k}",
        "trainer.checkpoint_every=2", "trainer.keep_checkpoints=10",
    )
    mixed = across_turns = mid_turn = multi_turn = 0
    for step, (learner_version, trajectories) in enumerate(recorded, start=1):
        for t in trajectories:
            versions = sampled_versions(t)
            assert len(versions) == t.num_sampled_tokens and versions == sorted(versions)
            assert t.policy_version == min(versions)
            assert learner_version - t.policy_version <= k  # trainer.max_staleness, on every trajectory
            assert max(versions) <= max(0, step - 1 - lag)
            multi_turn += t.num_turns > 1
            mixed += len(set(versions)) > 1
            turn_versions = [set(t.token_versions[a:b]) for a, b in t.turn_spans if b > a]
            across_turns += between_turns(turn_versions)
            mid_turn += any(len(v) > 1 for v in turn_versions)
    print("partial multi-turn:", dict(multi_turn=multi_turn, mixed=mixed, mid_turn=mid_turn, between_turns=across_turns))
    assert multi_turn > 0, "no episode took two turns: the test does not exercise multi-turn episodes"
    assert mixed > 0 and mid_turn > 0 and across_turns > 0, (mixed, mid_turn, across_turns)
    resumed = sum(s["partial_resumed"] for s in outcome.rl.steps)
    assert resumed > 0
    assert max(s["staleness_max"] for s in outcome.rl.steps) <= k

    # Resume from the step-2 checkpoint, taken with episodes in flight: the same weights and metrics.
    assert outcome.rl.steps[1]["partial_carried_groups"] > 0
    copy = tmp_path / "copy"
    run_training(load_config(str(copy_at_first_checkpoint(full, copy))), resume=True)
    assert_same_run(full, copy)
