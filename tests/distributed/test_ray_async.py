"""Async rollouts and partial rollouts on Ray rollout workers.

The async producer drives the workers through a `RayLane` (its own weight snapshots, shipped with
the versioned sync) while held-out evaluation samples through the RayEngine itself with the
learner's weights; partial rollouts forward per-row budgets and a group-quota stop rule to the
workers. One Ray session (2 CPUs) for the module; the end-to-end runs start from a random `nano`
model with a reward random responses can earn (no warm start: a few seconds per run).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.rollout.partial import GroupQuota, PartialEpisode, PartialGroup, sample_round
from reinforge.tasks.task import Task
from reinforge.trainer import rl_loop

ray = pytest.importorskip("ray")

from reinforge.distributed.ray_cluster import start_ray, stop_ray  # noqa: E402
from reinforge.distributed.ray_engine import RayEngine  # noqa: E402
from reinforge.run.pipeline import run_training  # noqa: E402
from run_records import assert_same_run, copy_at_first_checkpoint, run_metrics  # noqa: E402
from deadlines import PROCESS_START_S  # noqa: E402

CPU = 0.5

QUIET = ["telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'"]
RUN = [
    "model.preset=nano", "task.train_size=200", "task.eval_size=16", *QUIET, "sft.steps=0",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=12",
    "trainer.steps=6", "eval.every=2", "eval.samples=2", "algo.tis_cap=2.0", "trainer.schedule=async",
    # A random model's responses contain one of these letters about half the time: a reward with
    # variance inside each group, so every step really updates the weights.
    'reward.components=[{name: letters, fn: format, weight: 1.0, params: {pattern: ".*[a-m].*", require_stop: false}}]',
]
RAY = ["workers.workers=1", f"workers.cpus_per_worker={CPU}", "workers.timeout_s=60", f"workers.startup_timeout_s={PROCESS_START_S:g}"]


@pytest.fixture(scope="module")
def ray_session():
    start_ray(None, num_cpus=2)
    yield
    stop_ray()


def train(run_dir: Path, *overrides: str, resume: bool = False):
    return run_training(load_config("default", [*RUN, f"trainer.output_dir={run_dir}", *overrides]), resume=resume)


# ---------------------------------------------------------------------------- the engine's two users


def test_a_lane_and_the_engine_sample_with_their_own_weights(ray_session, sharp_nano_model, tokenizer, arithmetic_prompts) -> None:
    model = copy.deepcopy(sharp_nano_model)
    params = SamplingParams(max_new_tokens=8, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))
    prompts = [p for p in arithmetic_prompts for _ in range(2)]
    older = {k: v.clone() for k, v in model.state_dict().items()}
    with RayEngine(model, tokenizer.pad_token_id, num_workers=1, timeout_s=60, cpus_per_worker=CPU, startup_timeout_s=PROCESS_START_S) as engine:
        lane = engine.lane()
        lane.load_weights(older, 3)
        with torch.no_grad():
            model.lm_head.weight.mul_(1.5)  # the learner moves on
        engine.stage_weights(4)  # staged, not loaded: the lane keeps the workers
        assert engine._held.version == 3

        local = TorchEngine(copy.deepcopy(model), tokenizer.pad_token_id)
        local.sync_weights(4)
        old_model = copy.deepcopy(sharp_nano_model)
        old_local = TorchEngine(old_model, tokenizer.pad_token_id)
        old_local.sync_weights(3)
        for _ in range(2):  # interleaved: each call loads its caller's weights first
            mine = engine.generate(prompts, params, seed=1)
            theirs = lane.generate(prompts, params, seed=1)
            assert [(g.token_ids, g.logprobs, g.policy_version) for g in mine] == [
                (g.token_ids, g.logprobs, g.policy_version) for g in local.generate(prompts, params, seed=1)
            ]
            assert [(g.token_ids, g.logprobs, g.policy_version) for g in theirs] == [
                (g.token_ids, g.logprobs, g.policy_version) for g in old_local.generate(prompts, params, seed=1)
            ]
        with pytest.raises(TypeError, match="load_weights"):
            lane.sync_weights(5)


# ---------------------------------------------------------------------------- partial rollouts


def fresh_groups(prompts: list[list[int]], group_size: int) -> list[PartialGroup]:
    return [
        PartialGroup(Task(id=f"t{i}", prompt="", answer=""), i, list(p), [PartialEpisode() for _ in range(group_size)])
        for i, p in enumerate(prompts)
    ]


def episodes(groups: list[PartialGroup]) -> list[tuple]:
    return [(e.token_ids, e.logprobs, e.versions, e.finish_reason) for g in groups for e in g.episodes]


def test_group_quota_splits_into_whole_groups_with_quotas_that_add_up() -> None:
    rule = GroupQuota(
        group_of_row=torch.tensor([0, 0, 2, 3, 3, 4]), done_before=torch.tensor([0, 2, 1, 0, 1]),
        sizes=torch.tensor([2, 2, 2, 2, 2]), must=torch.tensor([False, False, False, True, False]), need=3,
    )
    parts = rule.split(2)  # group 1 is complete already: 2 more groups needed over groups 0, 2, 3, 4
    assert [(a, b) for a, b, _ in parts] == [(0, 3), (3, 6)]
    assert [r.need for _, _, r in parts] == [1, 1]
    assert parts[1][2].must.tolist() == [True, False] and parts[1][2].group_of_row.tolist() == [0, 0, 1]
    assert not parts[1][2](torch.tensor([False, False, True]))  # group 4 done, but must-finish group 3 is not
    assert parts[1][2](torch.tensor([True, True, False]))
    assert [(a, b, r.need) for a, b, r in rule.split(8)] == [(0, 2, 1), (2, 3, 1), (3, 5, 0), (5, 6, 0)]


def test_partial_rounds_run_on_ray_workers(ray_session, sharp_nano_model, tokenizer, arithmetic_prompts) -> None:
    model = copy.deepcopy(sharp_nano_model)
    params = SamplingParams(max_new_tokens=24, temperature=1.0, stop_token_ids=(257, 258, 31))  # frequent for this model
    local = TorchEngine(model, tokenizer.pad_token_id)
    must = [False, False, False, True, False]

    # One worker takes the stop rule as it is: exactly the in-process round.
    expected, got = fresh_groups(arithmetic_prompts, 4), fresh_groups(arithmetic_prompts, 4)
    stats = sample_round(local, expected, params, 7, 0, 2, must)
    assert stats.aborted > 0, "no row was cut short: the test does not exercise the early stop"
    with RayEngine(model, tokenizer.pad_token_id, num_workers=1, timeout_s=60, cpus_per_worker=CPU, startup_timeout_s=PROCESS_START_S) as one:
        assert sample_round(one, got, params, 7, 0, 2, must) == stats
    assert episodes(got) == episodes(expected)

    # Two workers: whole groups each, each stopping at its own quota; the round's guarantees hold.
    with RayEngine(model, tokenizer.pad_token_id, num_workers=2, timeout_s=60, cpus_per_worker=CPU, startup_timeout_s=PROCESS_START_S) as two:
        groups = fresh_groups(arithmetic_prompts, 4)
        stats = sample_round(two, groups, params, 7, 0, 2, must)
        assert sum(g.complete for g in groups) >= 2 and groups[3].complete
        assert stats.rows == 20 and stats.aborted == sum(not e.done for g in groups for e in g.episodes)
        for g in groups:
            assert g.start_index == 0
            for e in g.episodes:
                assert e.versions == [0] * len(e.token_ids) and e.rounds == 1
        two.sync_weights(1)
        again = sample_round(two, groups, params, 8, 1, 5, [False] * 5)  # resume every unfinished row
        assert all(g.complete for g in groups) and again.resumed > 0
        resumed = [e for g in groups for e in g.episodes if e.rounds == 2 and len(set(e.versions)) == 2]
        assert resumed and all(e.versions == sorted(e.versions) for e in resumed)
        with pytest.raises(ValueError, match="splits per worker"):
            two.generate(arithmetic_prompts, params, seed=1, stop_when=lambda finished: True)


# ---------------------------------------------------------------------------- async runs end to end


@pytest.fixture(scope="module")
def in_process_k1(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("local") / "run"
    train(run, "trainer.max_staleness=1")
    return run


@pytest.mark.slow  # a whole run (~20-100 s); .ci/run runs the slow group of this file
def test_async_k1_on_one_worker_equals_in_process(ray_session, in_process_k1: Path, tmp_path: Path, recorded) -> None:
    run = tmp_path / "ray"
    outcome = train(run, "trainer.max_staleness=1", *RAY, "trainer.checkpoint_every=2", "trainer.keep_checkpoints=10")
    assert_same_run(in_process_k1, run)  # the same operations in a worker: the same bits (tests/run_records.py)
    assert len({r["reward"] for r in run_metrics(run) if "reward" in r}) > 1  # the run really learns something
    assert len(recorded) == 6
    for step, (learner_version, trajectories) in enumerate(recorded, start=1):
        assert learner_version == step - 1
        for t in trajectories:
            assert learner_version - t.policy_version <= 1
            assert t.policy_version == max(0, step - 2)  # step s samples with the weights of step s-2
    assert [s["staleness_max"] for s in outcome.rl.steps] == [0.0] + [1.0] * 5

    # Resume from the step-2 checkpoint (drained mid-flight): the same weights and metrics.
    copy_dir = tmp_path / "copy"
    run_training(load_config(str(copy_at_first_checkpoint(run, copy_dir))), resume=True)
    assert_same_run(run, copy_dir)


# slow (pytest -m slow): k=0 reproducing sync bit for bit is in the suite in-process (tests/trainer/test_rollout_schedule.py)
@pytest.mark.slow
def test_async_k0_on_a_worker_is_sync(ray_session, tmp_path: Path) -> None:
    train(tmp_path / "sync", "trainer.schedule=sync", *RAY, "trainer.steps=3")
    train(tmp_path / "k0", "trainer.max_staleness=0", *RAY, "trainer.steps=3")
    assert_same_run(tmp_path / "sync", tmp_path / "k0")


def test_async_partial_rollouts_on_one_worker_equal_in_process(ray_session, tmp_path: Path, recorded, monkeypatch) -> None:
    # A random model almost never samples <eos>: stop on 30 of its ~260 tokens too, so responses end
    # at different lengths and rounds really stop early.
    original = rl_loop.sampling_params
    monkeypatch.setattr(rl_loop, "sampling_params", lambda cfg, stop: original(cfg, (*stop, *range(200, 230))))
    partial = ["trainer.max_staleness=2", "trainer.partial_rollouts=true", "trainer.overprovision=2.0",
               "trainer.steps=4", "rollout.max_new_tokens=16"]
    train(tmp_path / "local", *partial)
    local_batches = len(recorded)
    train(tmp_path / "ray", *partial, *RAY)
    assert_same_run(tmp_path / "local", tmp_path / "ray")
    rows = [r for r in run_metrics(tmp_path / "ray") if "partial_aborted" in r]
    assert sum(r["partial_aborted"] for r in rows) > 0 and sum(r["partial_resumed"] for r in rows) > 0
    for learner_version, trajectories in recorded[local_batches:]:
        for t in trajectories:
            versions = t.token_versions[t.prompt_length:]
            assert t.policy_version == min(versions) and learner_version - t.policy_version <= 2
