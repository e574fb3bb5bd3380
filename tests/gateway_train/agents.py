"""Agents for the gateway training tests, imported by path in the agent process."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path

_started = 0  # episodes started in this agent process
_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gateway_agent" / "agent.py"


def _example():
    spec = importlib.util.spec_from_file_location("gateway_example_agent", _EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def flaky(task, client, fail_at: int = 1):
    """The example agent, except that episode number `fail_at` of this process raises and the
    next one hangs (past env.agent_timeout_s): both must be counted and left out of the loss."""
    global _started
    _started += 1
    if _started == fail_at:
        raise RuntimeError("the agent's own bug")
    if _started == fail_at + 1:
        await asyncio.sleep(3600)
    return await _example().solve(task, client)


async def by_task(task, client):
    """Behaves as the task says: ok, raise, none, slow (async sleep), unpicklable."""
    kind = task["kind"]
    if kind == "raise":
        raise ValueError(f"bad task {task['n']}")
    if kind == "none":
        return None
    if kind == "slow":
        await asyncio.sleep(3600)
    if kind == "unpicklable":
        return lambda: None
    return {"answer": task["n"] * 2}


async def blocking(task, client):
    """Blocks the agent process's event loop (time.sleep in an async function) for the first task."""
    if task == "block":
        time.sleep(3600)
    return f"done {task}"


def sync_agent(task, client, suffix: str = ""):
    return f"{task}{suffix}"


async def one_call(task, client):
    model = (await client.models.list()).data[0].id
    response = await client.chat.completions.create(model=model, messages=[{"role": "user", "content": task.prompt}])
    return response.choices[0].message.content or ""


async def no_calls(task, client):
    return "42"


def not_an_agent(task):
    return None


async def slow_echo(task, client):
    """One model call, then a pause: a run is still inside its first rollout when it is stopped."""
    model = (await client.models.list()).data[0].id
    await client.chat.completions.create(model=model, messages=[{"role": "user", "content": task.prompt}])
    await asyncio.sleep(1.0)
    return "1"
