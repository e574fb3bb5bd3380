"""The agent process: episodes run concurrently in a child, each failure counted by kind, a
blocked child killed and replaced, nothing left behind."""

from __future__ import annotations

import asyncio
import os
import pickle
from pathlib import Path

import pytest

from reinforge.gateway.agent_runner import AgentJob, AgentRunner, AgentStartError, agent_spec
from reinforge.gateway.agent_worker import Child

AGENTS = str(Path(__file__).with_name("agents.py"))
URL = "http://127.0.0.1:9/v1"  # never called by these agents


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


class Pipe:
    """Stands in for the pipe to the parent: collects the child's messages."""

    def __init__(self):
        self.messages = []

    def send_bytes(self, data: bytes) -> None:
        self.messages.append(pickle.loads(data))


def run_in_this_process(agent, jobs, timeout_s=0.3, params=None):
    """The agent process's episode loop, run here (the process around it is tested below)."""
    pipe = Pipe()
    child = Child(agent, {"params": params or {}, "timeout_s": timeout_s, "api_key": "k", "concurrency": 8}, pipe)
    asyncio.run(child.run_batch(jobs))
    return pipe.messages


def test_each_episode_reports_its_result_or_its_failure_kind():
    from agents import by_task

    kinds = ["ok", "raise", "none", "slow", "unpicklable", "ok"]
    messages = run_in_this_process(by_task, [(f"e{i}", {"kind": k, "n": i}, URL) for i, k in enumerate(kinds)])
    done = [m for m in messages if m[0] == "done"]
    assert sorted(m[1] for m in messages if m[0] == "started") == sorted(m[1] for m in done) == [f"e{i}" for i in range(6)]
    assert done[-1][1] == "e3"  # reported as each ends: the slow one last
    outcomes = {key: outcome for _, key, outcome in done}
    assert [outcomes[f"e{i}"].failure for i in range(6)] == [None, "raised", "none", "timeout", "unpicklable", None]
    assert outcomes["e0"].ok and outcomes["e0"].result == {"answer": 0} and outcomes["e5"].result == {"answer": 10}
    assert "ValueError: bad task 1" in outcomes["e1"].error and "agents.py" in outcomes["e1"].error  # traceback's last lines
    assert "env.agent_timeout_s=0.3" in outcomes["e3"].error


def test_a_plain_function_runs_in_a_thread_with_its_params():
    from agents import sync_agent

    messages = run_in_this_process(sync_agent, [("a", "x", URL)], params={"suffix": "!"})
    assert messages[-1][2].result == "x!"


def test_a_blocked_agent_process_is_killed_and_replaced():
    runner = AgentRunner(f"{AGENTS}:blocking", {}, timeout_s=0.5, api_key="k", grace_s=0.5)
    try:
        outcomes = runner.run([AgentJob("a", "block", URL), AgentJob("b", "fine", URL)])
        assert runner.pid is None and runner.restarts == 1
        assert [outcomes[k].failure for k in "ab"] == ["killed", "killed"]
        assert "stopped answering" in outcomes["a"].error
        again = runner.run([AgentJob("c", "fine", URL)])  # a fresh child
        assert again["c"].ok and again["c"].result == "done fine"
        pid = runner.pid
    finally:
        runner.close()
    assert gone(pid)


def test_an_agent_from_python_travels_pickled():
    from agents import sync_agent

    assert agent_spec(f"{AGENTS}:sync_agent") == ("named", f"{AGENTS}:sync_agent")
    assert pickle.loads(agent_spec(sync_agent)[1]) is sync_agent
    with pytest.raises(AgentStartError, match="cannot be sent to the agent process"):
        agent_spec(lambda task, client: 1)


def test_an_agent_that_does_not_import_stops_at_start():
    runner = AgentRunner(f"{AGENTS}:no_such_agent", {}, timeout_s=1.0, api_key="k")
    with pytest.raises(AgentStartError, match="no_such_agent"):
        runner.start()
    assert runner.pid is None
