"""The gateway env under the async schedule: the producer's rollouts go through a gateway and an
agent process of their own, on the producer's engine lane, and sample with the versioned weights the
lag rule names (step s: the weights of step max(0, s-2) at max_staleness=1), token-exactly; held-out
evaluation, run while the producer samples ahead, goes through the run's engine, its own gateway and
agent process, and gets every episode answered. Everything is closed at the end."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from reinforge.config import load_config
from reinforge.gateway import agent_runner
from reinforge.gateway.env import GatewayEnv
from reinforge.run.pipeline import run_training
from reinforge.trainer import rl_loop, rollout_schedule
from snapshot_logprobs import gap_under, sampled_rows

HERE = Path(__file__).parent
RECIPE = str(HERE.parents[1] / "recipes" / "gateway-agent.yaml")
LAG, STEPS = 1, 4
MICRO = [
    "model.preset=nano", "task.train_size=64", "task.eval_size=4", "sft.steps=20", "sft.batch_size=8",
    "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=12", f"trainer.steps={STEPS}",
    "eval.every=2", "eval.samples=1", "env.max_turns=3", "env.agent_timeout_s=30", "trainer.checkpoint_every=0",
    "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off", "reward.isolation=thread",
    "trainer.schedule=async", f"trainer.max_staleness={LAG}", "algo.tis_cap=2.0",
]


def test_async_gateway_rollouts_use_the_lane_and_their_own_agent_process(tmp_path, monkeypatch, gateways) -> None:
    threads_before = set(threading.enumerate())
    pids, rollouts, snapshots, checked = [], [], {}, []
    step = {"now": 0}
    start = agent_runner.AgentRunner.start

    def record_pid(self):
        start(self)
        if self.pid not in pids:
            pids.append(self.pid)

    run_groups = GatewayEnv.run_groups

    def record_rollout(self, engine, *args, **kwargs):
        rollouts.append((threading.current_thread().name, id(engine), engine.policy_version))
        return run_groups(self, engine, *args, **kwargs)

    take = rollout_schedule.versioned_snapshots

    def record_snapshot(learner):
        snapshots[len(snapshots)] = taken = take(learner)  # in publication order: the weights of steps 0, 1, 2, ...
        return taken

    collect = rollout_schedule.AsyncSchedule.collect

    def collect_step(self, s):
        step["now"] = s
        return collect(self, s)

    prepare = rl_loop.prepare_batch

    def check_sampler(trajectories, kl, estimator, reward_weights, pad, learner, *rest):
        version, state = snapshots[max(0, step["now"] - 1 - LAG)]  # the lag rule
        assert {t.policy_version for t in trajectories} == {version}, f"step {step['now']}"
        assert 0 <= learner.version - version <= LAG  # one optimizer step per RL step
        rows = sampled_rows(trajectories)
        if rows:
            gap, bound = gap_under(learner, rows, pad, state)
            assert gap <= bound, f"step {step['now']}: not sampled by the snapshot of version {version}"
            checked.append(step["now"])
        return prepare(trajectories, kl, estimator, reward_weights, pad, learner, *rest)

    monkeypatch.setattr(agent_runner.AgentRunner, "start", record_pid)
    monkeypatch.setattr(GatewayEnv, "run_groups", record_rollout)
    monkeypatch.setattr(rollout_schedule, "versioned_snapshots", record_snapshot)
    monkeypatch.setattr(rollout_schedule.AsyncSchedule, "collect", collect_step)
    monkeypatch.setattr(rl_loop, "prepare_batch", check_sampler)
    run_dir = tmp_path / "run"
    run_training(load_config(RECIPE, [*MICRO, f"trainer.output_dir={run_dir}"]))

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl, evals = [r for r in rows if r["stage"] == "rl"], [r for r in rows if r["stage"] == "eval"]
    assert len(rl) == STEPS and [r["staleness_max"] for r in rl] == [float(min(s - 1, LAG)) for s in range(1, STEPS + 1)]
    assert all(r["env/model_calls"] > 0 and r["agent_dropped"] == 0 for r in rl)
    assert sorted(set(checked)) == list(range(1, STEPS + 1)), checked  # every step's tokens: the lane's snapshot
    assert [e["step"] for e in evals] == [0, 2, 4] and all(e["agent_failures"] == 0 for e in evals)

    # Who rolled out what: the producer thread through its lane, evaluation through the run's engine.
    produced = [r for r in rollouts if r[0] == "reinforge-rollout-producer"]
    evaluated = [r for r in rollouts if r[0] != "reinforge-rollout-producer"]
    assert len(produced) >= STEPS and evaluated
    assert {r[1] for r in produced}.isdisjoint({r[1] for r in evaluated})
    assert [r[2] for r in produced[:STEPS]] == [snapshots[max(0, s - 1 - LAG)][0] for s in range(1, STEPS + 1)]
    # one gateway and one agent process each, all gone at the end
    assert len(gateways) == 2 and len(pids) == 2
    assert all(not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z" for pid in pids)
    assert not any(t.is_alive() for g in gateways for t in getattr(g, "threads", []))
    lingering = [t for t in set(threading.enumerate()) - threads_before if t.is_alive() and not t.daemon]
    assert not lingering, lingering


def test_an_episode_without_model_calls_carries_the_rollouts_version(tokenizer) -> None:
    """Its age is 0 under any schedule (version 0 would read as stale as the run is long: a
    StalenessError at the first later step, sync or async)."""
    from types import SimpleNamespace

    from reinforge.gateway.agent_outcome import AgentOutcome
    from reinforge.tasks.task import Task

    env = GatewayEnv(tokenizer, "unused:agent")
    silent = SimpleNamespace(parts=lambda: [], calls=0, splits=0, branches=0, errors=[])
    (only,) = env.episode_trajectories(Task(id="t", prompt="q", answer="42"), 0, silent, AgentOutcome(ok=True, result="42"), 7)
    assert only.policy_version == 7 and not any(only.loss_mask)
