"""Ray rollout workers that sample with vLLM (engine.type=vllm with workers.workers > 0; marker `vllm`).

One worker (a Ray actor running vLLM in a child process of its own): it samples with the weights
the learner synced (greedy agrees with TorchEngine on the same weights), a partial round's stop
rule cuts its rows in lock-step there, and a lane samples with weights of its own beside the
engine; then an async run with partial rollouts trains end to end on it. The model is `micro`
(vLLM's CPU attention has no kernel for nano's head dimension 16).
"""

from __future__ import annotations

import copy

import pytest
import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.engines.vllm_engine import vllm_available
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.rollout.partial import GroupQuota
from reinforge.config import load_config
from reinforge.run.pipeline import run_training
from reinforge.trainer import rl_loop
from run_records import run_metrics
from tests.conftest import sharpen_
from lockstep_rounds import STOPS, lockstep_cut

ray = pytest.importorskip("ray")

from reinforge.distributed.ray_cluster import start_ray, stop_ray  # noqa: E402
from reinforge.distributed.ray_engine import RayEngine  # noqa: E402
from deadlines import PROCESS_START_S  # noqa: E402

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed: pip install 'reinforge[vllm]' (docs/scaling.md, 'vLLM')"),
]

VLLM = dict(startup_timeout_s=900.0, timeout_s=600.0, threads=1)


@pytest.fixture(scope="module")
def ray_session():
    start_ray(None, num_cpus=2)
    yield
    stop_ray()


@pytest.fixture(scope="module")
def engine(ray_session, tokenizer):
    model = sharpen_(build_tiny_llama(tokenizer, "micro", seed=0)).eval()
    with RayEngine(model, tokenizer.pad_token_id, num_workers=1, timeout_s=600, cpus_per_worker=0.5,
                   startup_timeout_s=PROCESS_START_S + 900, vllm=VLLM) as started:
        yield started


def test_a_vllm_worker_samples_with_the_synced_weights_and_stops_in_lockstep(engine, tokenizer, arithmetic_prompts) -> None:
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    local = TorchEngine(copy.deepcopy(engine.model), tokenizer.pad_token_id)
    assert [g.token_ids for g in engine.generate(arithmetic_prompts, greedy)] == [g.token_ids for g in local.generate(arithmetic_prompts, greedy)]

    params = SamplingParams(max_new_tokens=24, temperature=1.0, stop_token_ids=STOPS)
    prompts = [p for p in arithmetic_prompts for _ in range(4)]
    rule = GroupQuota(torch.arange(5).repeat_interleave(4), torch.zeros(5, dtype=torch.long), torch.full((5,), 4),
                      torch.tensor([True, False, False, False, False]), 2)
    stopped = engine.generate(prompts, params, seed=7, stop_when=rule)
    full = engine.generate(prompts, params, seed=7)
    assert [(g.token_ids, g.finish_reason) for g in stopped] == lockstep_cut(full, rule)
    assert any(g.finish_reason == "aborted" for g in stopped), "no row was cut short: the test does not exercise the stop"


def test_a_lane_on_a_vllm_worker_keeps_its_own_weights(engine, tokenizer, arithmetic_prompts) -> None:
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    older = {k: v.clone() for k, v in engine.model.state_dict().items()}
    lane = engine.lane()
    lane.load_weights(older, 3)
    sharpen_(engine.model, seed=2)  # the learner moves on
    engine.stage_weights(4)
    now = [g.token_ids for g in TorchEngine(copy.deepcopy(engine.model), tokenizer.pad_token_id).generate(arithmetic_prompts, greedy)]
    old_model = copy.deepcopy(engine.model)
    old_model.load_state_dict(older)
    before = [g.token_ids for g in TorchEngine(old_model, tokenizer.pad_token_id).generate(arithmetic_prompts, greedy)]
    assert now != before, "the two weight sets sample alike: no test"
    for _ in range(2):  # interleaved: each call loads its caller's weights on the worker first
        assert [g.token_ids for g in lane.generate(arithmetic_prompts, greedy)] == before
        assert [g.token_ids for g in engine.generate(arithmetic_prompts, greedy)] == now


def test_an_async_run_with_partial_rollouts_trains_on_a_vllm_worker(ray_session, tmp_path, recorded, monkeypatch) -> None:
    original = rl_loop.sampling_params
    monkeypatch.setattr(rl_loop, "sampling_params", lambda cfg, stop: original(cfg, (*stop, *STOPS)))
    run = tmp_path / "run"
    outcome = run_training(load_config("default", [
        "model.preset=micro", "task.train_size=200", "task.eval_size=8", "telemetry.progress=false", "telemetry.tensorboard=false",
        "telemetry.wandb='off'", "sft.steps=0", "engine.type=vllm", "engine.startup_timeout_s=900", "workers.workers=1",
        "workers.cpus_per_worker=0.5", "workers.timeout_s=600", f"workers.startup_timeout_s={PROCESS_START_S + 900:g}",
        "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=16", "trainer.steps=4", "eval.every=2",
        "eval.samples=1", "algo.tis_cap=2.0", "trainer.schedule=async", "trainer.max_staleness=2", "trainer.partial_rollouts=true",
        "trainer.overprovision=2.0", f"trainer.output_dir={run}",
        'reward.components=[{name: letters, fn: format, weight: 1.0, params: {pattern: ".*[a-m].*", require_stop: false}}]',
    ]))
    rows = [r for r in run_metrics(run) if "partial_aborted" in r]
    assert len(rows) == 4 and sum(r["partial_aborted"] for r in rows) > 0 and sum(r["partial_resumed"] for r in rows) > 0
    assert max(s["staleness_max"] for s in outcome.rl.steps) >= 1  # the producer ran ahead of the learner
    for learner_version, trajectories in recorded:
        for t in trajectories:
            versions = t.token_versions[t.prompt_length:]
            assert t.policy_version == min(versions) and learner_version - t.policy_version <= 2
