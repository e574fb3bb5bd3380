"""The prompt-value model and its PCL curriculum with the async schedule, partial rollouts and dynamic
sampling (issue 29): each runs a few steps on the nano model with the curriculum choosing prompts;
an async run draws with versioned copies of the value model, so two runs at one seed agree and a
resumed run ends as the uninterrupted one; partial groups and the groups dynamic sampling drops
train the value model when their outcomes arrive."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

from reinforge.cli import main
from reinforge.config import PromptValueConfig, load_config
from reinforge.run.pipeline import run_training
from reinforge.runtime.checkpoint import list_checkpoints, load_state
from reinforge.values.curriculum_sampler import CurriculumSampler
from run_records import assert_same_run, copy_at_first_checkpoint, run_metrics
from values.test_curriculum_sampler import TASKS, featurize, trajectories

QUIET = ["telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'"]
TINY = [
    "model.preset=nano", "task.train_size=64", "task.eval_size=4", *QUIET, "rollout.prompts_per_step=2", "rollout.group_size=4",
    "rollout.max_new_tokens=8", "trainer.steps=4", "eval.every=4", "eval.samples=1", "sft.steps=0", "trainer.checkpoint_every=2",
]
# A pass rate that depends on the prompt (tests/values/prompt_rates.py): groups vary, some are hopeless.
BY_ANSWER = 'reward.components=[{name: correct, fn: "tests.values.prompt_rates:by_answer"}]'
PCL = ["prompt_value.enabled=true", "prompt_value.curriculum=pcl", BY_ANSWER]
ASYNC = ["trainer.schedule=async", "trainer.max_staleness=1", "algo.tis_cap=2.0"]
PARTIAL = ["trainer.partial_rollouts=true", "trainer.max_staleness=1", "algo.tis_cap=2.0"]
DYNAMIC = ["algo.dynamic_sampling=true", "algo.max_sampling_rounds=3"]


def train(run_dir: Path, overrides: list[str]) -> tuple[list[dict], dict]:
    """The run's RL rows and its last checkpoint's sampler state."""
    run_training(load_config("default", [*TINY, *PCL, *overrides, f"trainer.output_dir={run_dir}"]))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["stage"] == "rl"], load_state(list_checkpoints(run_dir)[-1])["sampler"]


def assert_curriculum_acted(rows: list[dict]) -> None:
    """The value model trained every step, and PCL kept other prompts than its pool's average: a uniform
    draw of the pool would select predictions averaging the pool's, step after step."""
    for r in rows:
        assert r["value/groups_observed"] >= r["train_groups"] and r["value/loss"] == r["value/loss"]  # not nan
    assert all(r["value/selected_pred_mean"] != r["value/pool_pred_mean"] for r in rows)
    target = 0.5
    nearer = [abs(r["value/selected_pred_mean"] - target) < abs(r["value/pool_pred_mean"] - target) for r in rows]
    assert sum(nearer) > len(rows) / 2, [(r["value/selected_pred_mean"], r["value/pool_pred_mean"]) for r in rows]


def test_pcl_under_async_acts_and_two_runs_at_one_seed_agree(tmp_path: Path) -> None:
    rows, sampler = train(tmp_path / "a", ASYNC)
    assert max(r["staleness_max"] for r in rows) == 1  # the producer sampled ahead with older weights
    assert_curriculum_acted(rows)
    assert sampler["versions"]  # the value-model versions the producer draws with ride in the checkpoint
    train(tmp_path / "b", ASYNC)
    assert run_metrics(tmp_path / "a") == run_metrics(tmp_path / "b")  # value/* included, timings aside


def test_pcl_under_async_resumes_exactly(tmp_path: Path) -> None:
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    args = [*TINY, *PCL, *ASYNC]
    assert main(["train", "--output", str(reference), *args]) == 0
    copy_at_first_checkpoint(reference, resumed)
    assert main(["train", "--resume", str(resumed)]) == 0
    assert_same_run(resumed, reference)


def test_pcl_with_partial_rollouts_learns_from_groups_finished_steps_later(tmp_path: Path) -> None:
    rows, sampler = train(tmp_path, PARTIAL)
    assert_curriculum_acted(rows)
    assert max(r["staleness_max"] for r in rows) == 1  # groups begun with the weights before the last update trained
    assert all(r["value/groups_observed"] == r["train_groups"] for r in rows)
    # The groups still in flight keep the predictions made when they were drawn, for when they finish.
    assert sum(len(q) for q in sampler["pending"].values()) == rows[-1]["partial_carried_groups"] > 0


def test_pcl_with_dynamic_sampling_learns_from_the_dropped_groups(tmp_path: Path) -> None:
    rows, sampler = train(tmp_path, DYNAMIC)
    assert_curriculum_acted(rows)
    observed, trained = sum(r["value/groups_observed"] for r in rows), sum(r["train_groups"] for r in rows)
    assert observed > trained  # all-equal groups dropped before the loss reached the value model
    assert len(sampler["value"]["buffer"]) == observed and not sampler["pending"]  # every group drawn was learned from


def test_a_versioned_draw_predicts_with_the_version_of_its_weights_step() -> None:
    """What the async producer relies on: drawing with version t gives the predictions the value model
    made right after observe(step=t), however far the learner's thread has trained it since."""
    cfg = PromptValueConfig(enabled=True, curriculum="pcl", pool_factor=2, updates_per_step=5)
    live = CurriculumSampler(TASKS, seed=0, cfg=cfg, featurize=featurize, embed_dim=3)
    live.start_versions(0)
    passes = {t.id: int(t.id[1:]) % 5 for t in TASKS}
    live.draw_index = 0
    first = live.next_batch(4)
    live.observe(trajectories(first, passes), step=1)
    at_one = copy.deepcopy(live.value)  # the model as version 1 has it
    live.draw_index = 1
    second = live.next_batch(4)
    live.observe(trajectories(second, passes), step=2)  # the learner trains on; the producer still draws with 1
    live.draw_index = 1
    probe = TASKS[:8]
    drawn = live.next_batch(4)
    queued = [live.pending[t.id][-1][2] for t in drawn]
    expected, _ = at_one.predict(featurize(drawn))
    assert queued == expected.tolist()
    assert not torch.equal(live.value.predict(featurize(probe))[0], at_one.predict(featurize(probe))[0])  # it did train on
    assert sorted(live.versions) == [1, 2]  # versions older than the one drawn with are gone


def test_a_versioned_dump_draw_weighs_distributions_by_its_versions_learnability() -> None:
    """DUMP under async: the producer's draw reads the learnability windows as version t left them,
    not the ones the learner's thread has appended to since."""
    cfg = PromptValueConfig(curriculum="dump", dump_key="digits", dump_c=0.01)
    s = CurriculumSampler(TASKS, seed=0, cfg=cfg, featurize=None, embed_dim=None)
    s.start_versions(0)
    s.draw_index = 0
    batch = s.next_batch(4)  # both distributions drawn: no infinite bound left
    s.take_draw_metrics()
    ones = trajectories(batch, {t.id: 2 for t in TASKS})
    s.observe(ones, {t.group_id: (1.0 if batch[t.group_id].metadata["digits"] == 1 else 0.0) for t in ones}, step=1)
    at_one = s.bandit.windows_copy()
    s.observe(ones, {t.group_id: (0.0 if batch[t.group_id].metadata["digits"] == 1 else 5.0) for t in ones}, step=2)
    s.draw_index = 1
    s.next_batch(1)
    drawn = s.take_draw_metrics()
    assert [drawn["dump/prob/1"], drawn["dump/prob/2"]] == s.bandit.probabilities(at_one)
    assert drawn["dump/prob/1"] > 0.5 > s.bandit.probabilities()[0]  # version 1 favours digits=1; the live windows no longer do
