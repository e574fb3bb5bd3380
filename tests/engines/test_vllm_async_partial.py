"""The async schedule and partial rollouts on the vLLM engine (marker `vllm`; a few minutes on 2 cores).

The engine half: a partial round's stop rule runs inside the vLLM process and cuts rows exactly
where TorchEngine's lock-step sampling would have cut the same tokens (reinforge.engines.lockstep_stop),
a cut row resumes with newer weights, and a lane samples with weights of its own on the same vLLM
process while the engine samples with the learner's. The loop half: an async run (k = 1) and an
async run with partial rollouts train end to end on vLLM with the staleness the schedule promises.
The model is `micro` (vLLM's CPU attention has no kernel for nano's head dimension 16).
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.engines.vllm_engine import VllmEngine, vllm_available
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.rollout.partial import GroupQuota, PartialEpisode, PartialGroup, sample_round
from reinforge.run.pipeline import run_training
from reinforge.tasks.task import Task
from reinforge.trainer import rl_loop
from lockstep_rounds import STOPS, lockstep_cut
from run_records import run_metrics
from tests.conftest import sharpen_

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed: pip install 'reinforge[vllm]' (docs/scaling.md, 'vLLM')"),
]

@pytest.fixture(scope="module")
def policy(tokenizer):
    return sharpen_(build_tiny_llama(tokenizer, "micro", seed=0)).eval()


@pytest.fixture(scope="module")
def engine(policy, tokenizer):
    with VllmEngine(copy.deepcopy(policy), tokenizer.pad_token_id, startup_timeout_s=900, timeout_s=600) as started:
        yield started


def fresh_groups(prompts: list[list[int]], group_size: int) -> list[PartialGroup]:
    return [
        PartialGroup(Task(id=f"t{i}", prompt="", answer=""), i, list(p), [PartialEpisode() for _ in range(group_size)])
        for i, p in enumerate(prompts)
    ]


def test_a_partial_round_stops_in_lockstep_and_resumes_with_newer_weights(engine, policy, arithmetic_prompts) -> None:
    params = SamplingParams(max_new_tokens=24, temperature=1.0, stop_token_ids=STOPS)
    must = [True, False, False, False, False]  # (group 0 ends early for this model and seed: a must-finish that ends last cuts nothing)
    groups = fresh_groups(arithmetic_prompts, 4)
    prompts = [g.prompt_ids for g in groups for _ in g.episodes]
    rule = GroupQuota(torch.arange(5).repeat_interleave(4), torch.zeros(5, dtype=torch.long), torch.full((5,), 4), torch.tensor(must), 2)

    # The rule runs in the vLLM process; the kept tokens are the never-stopped call's, cut in lock-step.
    stopped = engine.generate(prompts, params, seed=7, stop_when=rule)
    full = engine.generate(prompts, params, seed=7)
    assert [(g.token_ids, g.finish_reason) for g in stopped] == lockstep_cut(full, rule)
    assert any(g.finish_reason == "aborted" for g in stopped), "no row was cut short: the test does not exercise the stop"

    stats = sample_round(engine, groups, params, 7, 0, 2, must)
    assert stats.aborted > 0 and sum(g.complete for g in groups) >= 2 and groups[0].complete
    sharpen_(engine.model, seed=1)  # the learner's update
    engine.sync_weights(1)
    again = sample_round(engine, groups, params, 8, 1, 5, [False] * 5)  # resume every unfinished row
    assert all(g.complete for g in groups) and again.resumed == stats.aborted
    resumed = [e for g in groups for e in g.episodes if e.rounds == 2]
    assert resumed and all(e.versions[0] == 0 and e.versions[-1] == 1 and e.versions == sorted(e.versions) for e in resumed)
    assert all(len(e.token_ids) <= params.max_new_tokens for g in groups for e in g.episodes)


def test_a_lane_and_the_engine_sample_with_their_own_weights(engine, tokenizer, arithmetic_prompts) -> None:
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    older = {k: v.clone() for k, v in engine.model.state_dict().items()}
    lane = engine.lane()
    lane.load_weights(older, 3)
    sharpen_(engine.model, seed=2)  # the learner moves on
    engine.stage_weights(4)  # staged, not loaded: the lane keeps the vLLM process
    assert engine._held.version == 3

    now = TorchEngine(copy.deepcopy(engine.model), tokenizer.pad_token_id).generate(arithmetic_prompts, greedy)
    old_model = copy.deepcopy(engine.model)
    old_model.load_state_dict(older)
    before = TorchEngine(old_model, tokenizer.pad_token_id).generate(arithmetic_prompts, greedy)
    assert [g.token_ids for g in now] != [g.token_ids for g in before], "the two weight sets sample alike: no test"
    for _ in range(2):  # interleaved: each call loads its caller's weights first
        mine, theirs = engine.generate(arithmetic_prompts, greedy), lane.generate(arithmetic_prompts, greedy)
        assert [g.token_ids for g in mine] == [g.token_ids for g in now] and {g.policy_version for g in mine} == {4}
        assert [g.token_ids for g in theirs] == [g.token_ids for g in before] and {g.policy_version for g in theirs} == {3}
    with pytest.raises(TypeError, match="load_weights"):
        lane.sync_weights(5)


# ---------------------------------------------------------------------------- runs end to end

RUN = [
    "model.preset=micro", "task.train_size=200", "task.eval_size=8", "telemetry.progress=false", "telemetry.tensorboard=false",
    "telemetry.wandb='off'", "sft.steps=0", "engine.type=vllm", "engine.startup_timeout_s=900",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=12", "trainer.steps=4", "eval.every=2",
    "eval.samples=1", "algo.tis_cap=2.0", "trainer.schedule=async",
    # A random model's responses contain one of these letters about half the time: every step updates the weights.
    'reward.components=[{name: letters, fn: format, weight: 1.0, params: {pattern: ".*[a-m].*", require_stop: false}}]',
]


def test_an_async_run_samples_on_vllm_with_bounded_staleness(tmp_path: Path, recorded) -> None:
    outcome = run_training(load_config("default", [*RUN, "trainer.max_staleness=1", f"trainer.output_dir={tmp_path / 'run'}"]))
    assert len(recorded) == 4
    for step, (learner_version, trajectories) in enumerate(recorded, start=1):
        assert learner_version == step - 1
        assert {t.policy_version for t in trajectories} == {max(0, step - 2)}  # step s samples with the weights of step s-2
    assert [s["staleness_max"] for s in outcome.rl.steps] == [0.0, 1.0, 1.0, 1.0]
    assert len([r for r in run_metrics(tmp_path / "run") if r.get("stage") == "eval"]) == 3  # evaluation between: start, 2, 4


def test_partial_rollouts_run_on_vllm(tmp_path: Path, recorded, monkeypatch) -> None:
    original = rl_loop.sampling_params
    monkeypatch.setattr(rl_loop, "sampling_params", lambda cfg, stop: original(cfg, (*stop, *STOPS)))
    run = tmp_path / "run"
    run_training(load_config("default", [
        *RUN, "trainer.max_staleness=2", "trainer.partial_rollouts=true", "trainer.overprovision=2.0", "rollout.max_new_tokens=16",
        f"trainer.output_dir={run}",
    ]))
    rows = [r for r in run_metrics(run) if "partial_aborted" in r]
    assert len(rows) == 4
    assert sum(r["partial_aborted"] for r in rows) > 0 and sum(r["partial_resumed"] for r in rows) > 0
    versions_seen = set()
    for learner_version, trajectories in recorded:
        for t in trajectories:
            versions = t.token_versions[t.prompt_length:]
            versions_seen.update(versions)
            assert t.policy_version == min(versions) and learner_version - t.policy_version <= 2
    assert len(versions_seen) > 1  # later rounds sample with newer weights
