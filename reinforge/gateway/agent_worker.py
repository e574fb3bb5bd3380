"""The body of the agent process (started by `reinforge.gateway.agent_runner`): the user's agent
runs here, never in the trainer's process, so that a hung agent can be stopped by killing it.

A fresh interpreter (not a fork of the trainer and its torch threads), in its own session.
Protocol over two pipes, each message a pickle:

    parent -> child   {"sys_path", "roots", "agent": ("named", path) | ("pickled", bytes), "params",
                       "timeout_s", "concurrency", "api_key"}                                  once
    child -> parent   ("ready", pid) | ("failed", traceback)
    parent -> child   [(key, task, base_url), ...]                a rollout's episodes
    child -> parent   ("started", key)                            as each episode starts
                      ("done", key, outcome)                      as each one ends (AgentOutcome)
                      ("batch_end", stuck_threads)                when every episode has ended

The episodes of a rollout run concurrently on one asyncio loop (at most `concurrency` at once),
each with its own `openai.AsyncOpenAI` client pointed at its gateway session (one connection
pool shared by all) and each under
`asyncio.wait_for(timeout_s)`. A plain (sync) function runs in a thread with a sync
`openai.OpenAI` client; a thread cannot be stopped, so a sync agent that times out is left
running and reported (`stuck_threads`), and the parent replaces this process.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import pickle
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

from reinforge.gateway.agent_outcome import AgentOutcome, last_lines

CLIENT_TIMEOUT_CAP_S = 600.0


def build_agent(setup: dict):
    from reinforge.import_paths import load_object, use_import_roots

    use_import_roots(setup["roots"])
    kind, value = setup["agent"]
    return load_object(value) if kind == "named" else pickle.loads(value)


def in_daemon_thread(fn) -> tuple[threading.Thread, asyncio.Future]:
    """Run `fn` in a daemon thread (an executor's threads would be joined at exit, and a hung
    agent never ends); its value or exception arrives in the returned future."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(value, error) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(value)

    def body() -> None:
        try:
            value, error = fn(), None
        except BaseException as err:  # noqa: BLE001 - handed to the awaiting episode
            value, error = None, err
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop has closed (the episode timed out long ago)
            pass

    thread = threading.Thread(target=body, daemon=True, name="reinforge-sync-agent")
    thread.start()
    return thread, future


class Child:
    def __init__(self, agent, setup: dict, writer: Connection):
        self.agent, self.params = agent, dict(setup["params"])
        self.timeout_s, self.api_key = float(setup["timeout_s"]), setup["api_key"]
        self.concurrency = int(setup["concurrency"])
        self.writer = writer
        self.is_async = inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(getattr(agent, "__call__", None))
        self.stuck: list[threading.Thread] = []
        self.http = self.sync_http = None  # the episodes' shared connection pools (run_batch)

    def send(self, message: tuple) -> None:
        self.writer.send_bytes(pickle.dumps(message))

    async def run_batch(self, jobs: list[tuple]) -> None:
        import httpx
        import openai

        # One connection pool for every episode's client: building an httpx client per episode
        # costs ~0.2 s of this loop's time on a busy machine, which would spread the agents'
        # first requests over seconds and defeat the gateway's batching window.
        limits = httpx.Limits(max_connections=self.concurrency + 8, max_keepalive_connections=self.concurrency + 8)
        timeout = min(self.timeout_s, CLIENT_TIMEOUT_CAP_S)
        self.http = openai.DefaultAsyncHttpxClient(limits=limits, timeout=timeout)
        if self.sync_http is None and not self.is_async:
            self.sync_http = openai.DefaultHttpxClient(limits=limits, timeout=timeout)
        gate = asyncio.Semaphore(self.concurrency)
        try:
            await asyncio.gather(*(self.episode(gate, *job) for job in jobs))
        finally:
            await self.http.aclose()

    async def episode(self, gate: asyncio.Semaphore, key: str, task, base_url: str) -> None:
        async with gate:
            self.send(("started", key))
            started = time.monotonic()
            outcome = await self.outcome(task, base_url)
            outcome.seconds = time.monotonic() - started
            try:
                message = pickle.dumps(("done", key, outcome))
            except Exception as err:  # noqa: BLE001 - the result cannot cross back: a counted failure
                message = pickle.dumps(("done", key, AgentOutcome.failed("unpicklable", f"the agent's result cannot be pickled ({type(err).__name__}: {err}); return plain data (str, numbers, lists, dicts)")))
            self.writer.send_bytes(message)

    async def outcome(self, task, base_url: str) -> AgentOutcome:
        import openai

        client_timeout = min(self.timeout_s, CLIENT_TIMEOUT_CAP_S)
        try:
            if self.is_async:
                client = openai.AsyncOpenAI(
                    base_url=base_url, api_key=self.api_key, max_retries=0, timeout=client_timeout, http_client=self.http
                )
                result = await asyncio.wait_for(self.agent(task, client, **self.params), self.timeout_s)
            else:
                client = openai.OpenAI(
                    base_url=base_url, api_key=self.api_key, max_retries=0, timeout=client_timeout, http_client=self.sync_http
                )
                thread, answer = in_daemon_thread(lambda: self.agent(task, client, **self.params))
                try:
                    result = await asyncio.wait_for(answer, self.timeout_s)
                except asyncio.TimeoutError:
                    self.stuck.append(thread)
                    raise
        except asyncio.TimeoutError:
            return AgentOutcome.failed("timeout", f"the agent did not return within env.agent_timeout_s={self.timeout_s:g} s")
        except Exception as err:  # noqa: BLE001 - any error of the user's agent is the episode's outcome
            return AgentOutcome.failed("raised", f"the agent raised {type(err).__name__}: {err}\n{last_lines(traceback.format_exc())}")
        if result is None:
            return AgentOutcome.failed("none", "the agent returned None (an agent returns its answer: a str or plain data)")
        try:
            pickle.dumps(result)
        except Exception as err:  # noqa: BLE001 - pickling raises many types
            return AgentOutcome.failed("unpicklable", f"the agent's result cannot be pickled ({type(err).__name__}: {err}); return plain data")
        return AgentOutcome(ok=True, result=result)


def serve(reader: Connection, writer: Connection) -> None:
    setup = pickle.loads(reader.recv_bytes())
    sys.path[:] = setup["sys_path"]
    try:
        agent = build_agent(setup)
        import openai  # noqa: F401 - imported now, so the first rollout does not pay for it
    except BaseException:  # noqa: BLE001 - reported to the parent, which stops the run with it
        writer.send_bytes(pickle.dumps(("failed", traceback.format_exc())))
        return
    child = Child(agent, setup, writer)
    child.send(("ready", os.getpid()))
    while True:
        try:
            jobs = pickle.loads(reader.recv_bytes())
        except EOFError:  # the parent closed the runner
            return
        asyncio.run(child.run_batch(jobs))
        child.send(("batch_end", sum(t.is_alive() for t in child.stuck)))


def main() -> None:
    from reinforge.rewards.reward_worker import die_with_parent

    die_with_parent()
    read_fd, write_fd, parent_pid = (int(a) for a in sys.argv[1:4])
    if os.getppid() != parent_pid:
        return
    serve(Connection(read_fd, writable=False), Connection(write_fd, readable=False))


if __name__ == "__main__":
    main()
