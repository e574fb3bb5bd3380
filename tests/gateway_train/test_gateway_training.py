"""End to end: RL steps of a micro config through the gateway, the agent in its own process.

The agent is the example agent (openai client, calculator tool), except that the first training
episode raises and the second hangs: both are counted and left out of the loss (not scored 0). The trained
trajectories are token-exact: the learner's log-probs of the sampled tokens equal the behaviour
log-probs the gateway recorded, within float noise. Nothing is left behind: no agent process, no
server thread, no open port.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from float_bounds import assert_within, logit_bound
import reinforge
from reinforge.config import ConfigError
from reinforge.gateway import agent_runner
from reinforge.learner.batch import collate
from reinforge.trainer import rl_loop

HERE = Path(__file__).parent
EXAMPLE = HERE.parents[1] / "examples" / "gateway_agent" / "agent.py"
MICRO = [
    "model.preset=nano", "task.source=arithmetic", "task.params={op: '*', digits: 3, digits_b: 2, tool_traces: 0.5}",
    "task.train_size=64", "task.eval_size=4", "sft.steps=20", "sft.batch_size=8", "rollout.prompts_per_step=2",
    "rollout.group_size=4", "rollout.max_new_tokens=12", "trainer.steps=1", "eval.every=1", "eval.samples=1",
    "rollout.prompt_format=chat", f"env.agent_tools={EXAMPLE}:TOOLS", "env.max_turns=3",
    "env.agent_timeout_s=2",
    "env.params={fail_at: 9}",  # the step-0 evaluation runs episodes 1-8 (4 greedy, 4 sampled); step 1's first two fail "trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false",
    "reward.components=[{name: correct, fn: verifier, weight: 1.0}]", "reward.isolation=thread",
]


def port_closed(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_rl_through_the_gateway_is_token_exact_counts_failures_and_leaves_nothing(tmp_path, monkeypatch, gateways):
    threads_before = set(threading.enumerate())
    pids, gaps = [], []
    start = agent_runner.AgentRunner.start

    def record_pid(self):
        start(self)
        pids.append(self.pid)

    original = rl_loop.prepare_batch

    def check_tokens(trajectories, algo, estimator, weights, pad, learner, *rest):
        batch = collate(trajectories, None, pad)
        logprobs = learner.logprobs(batch)
        bound = logit_bound(learner.model, [t.token_ids for t in trajectories])
        assert_within(logprobs[batch.loss_mask], batch.old_logprobs[batch.loss_mask], bound, "learner vs gateway log-probs")
        gaps.append(len(trajectories))
        return original(trajectories, algo, estimator, weights, pad, learner, *rest)

    monkeypatch.setattr(agent_runner.AgentRunner, "start", record_pid)
    monkeypatch.setattr(rl_loop, "prepare_batch", check_tokens)
    from agents import flaky

    outcome = reinforge.train("default", MICRO, agent=flaky, output_dir=tmp_path / "run")  # the Python API
    assert outcome.config.env.type == "gateway" and outcome.config.env.agent.endswith("flaky")

    steps = [json.loads(line) for line in (outcome.run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [s for s in steps if s["stage"] == "rl"]
    assert len(outcome.steps) == len(rl) == 1
    assert len(rl) == 1 and gaps, "one RL step, trained on token-exact trajectories"
    step = rl[0]
    # 8 episodes; one raised, one hung: counted, and left out of the loss (their group keeps 2 episodes)
    assert step["agent_dropped"] == 2.0 and step["agent_groups_dropped"] == 0.0
    assert step["env/agent_errors"] * 8 >= 1 - 1e-9 and step["env/agent_timeouts"] * 8 >= 1 - 1e-9
    assert step["env/model_calls"] > 0
    samples = [json.loads(line) for line in (outcome.run_dir / "samples.jsonl").read_text().splitlines()]
    failed = [s for s in samples if s["finish_reason"] == "agent_error"]
    assert {e.split(":")[0] for s in failed for e in s["errors"]} >= {"agent raised", "agent timeout"}
    # the reward curve is made of the scored episodes only (a failure is not a 0)
    assert not any(s["rewards"] for s in failed)
    evals = [s for s in steps if s["stage"] == "eval"]
    assert all("agent_failures" in e for e in evals)

    # nothing left: agent processes, server threads, ports
    assert pids and all(not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z" for pid in pids)
    assert gateways and all(port_closed(int(g.base_url.rsplit(":", 1)[1].split("/")[0])) for g in gateways if _started(g))
    lingering = [t for t in set(threading.enumerate()) - threads_before if t.is_alive() and not t.daemon]
    assert not lingering, lingering
    assert not any(t.is_alive() for g in gateways for t in getattr(g, "threads", []))  # the gateway's own (server, engine worker)


def test_an_agent_from_python_that_cannot_reach_the_agent_process_is_refused_before_compute(tmp_path):
    with pytest.raises(ConfigError, match="env.agent: .*cannot be sent to the agent process"):
        reinforge.train("default", MICRO, agent=lambda task, client: "1", output_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def _started(gateway) -> bool:
    try:
        gateway.base_url
    except Exception:  # noqa: BLE001 - a closed stand-in has no address any more
        return False
    return True
