"""Runs the user's agent episodes in a long-lived child process (reinforge.gateway.agent_worker).

The agent never runs in the trainer's process: a hung agent must be stoppable, and a process can
be killed where a thread cannot (DESIGN invariant 2). `run(jobs, on_done)` sends a rollout's
episodes to the child, which runs them concurrently (each under `timeout_s`) and reports each as it
ends, so the caller can close that episode's gateway session at once (the gateway's batcher stops
waiting for it). When the child stops answering (a blocking agent holds its event loop), the
runner kills it (with anything it started: its own session) once an episode it has started is
`grace_s` past its timeout, reports every episode without an outcome as timed out (`killed`), and
starts a fresh child for the next rollout. A child left with hung sync-agent threads is replaced
the same way. `close()` kills the child; an atexit hook and the Linux parent-death signal cover
an abrupt end: no process outlives the run.

The child is a fresh interpreter (`python -c`), given this process's sys.path and the run's
import roots; the agent is named by import path, or pickled when it was handed over from Python.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from reinforge.gateway.agent_outcome import AgentOutcome

START_TIMEOUT_S = 120.0
GRACE_S = 5.0  # past an episode's own timeout, the time the child has to report it before it is killed
_BOOTSTRAP = "import sys; sys.path[:0] = {path!r}; from reinforge.gateway.agent_worker import main; main()"

_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for runner in list(_LIVE):
        runner.close()


class AgentStartError(RuntimeError):
    """The agent process could not import or build the agent."""


@dataclass
class AgentJob:
    key: str  # the episode's gateway session key
    task: Any
    base_url: str


def agent_spec(agent: str | Any) -> tuple[str, Any]:
    """("named", import path) for a path, else ("pickled", bytes); a clear error when the object
    cannot be sent to the agent process."""
    from reinforge.import_paths import bound_object, is_in_memory

    if isinstance(agent, str) and not is_in_memory(agent):
        return ("named", agent)
    obj = bound_object(agent) if isinstance(agent, str) else agent
    try:
        return ("pickled", pickle.dumps(obj))
    except Exception as err:  # noqa: BLE001 - pickling raises many types
        raise AgentStartError(
            f"the agent {agent!r} cannot be sent to the agent process ({type(err).__name__}: {err}); agents run in "
            "a separate process so that a hung one can be stopped: define it at module level and name it by import path"
        ) from None


class AgentRunner:
    def __init__(
        self, agent: str | Any, params: dict, timeout_s: float, api_key: str, concurrency: int = 256,
        grace_s: float = GRACE_S, start_timeout_s: float = START_TIMEOUT_S,
    ):
        self.spec = agent_spec(agent)
        self.params, self.timeout_s, self.api_key = dict(params), float(timeout_s), api_key
        self.concurrency, self.grace_s, self.start_timeout_s = int(concurrency), float(grace_s), float(start_timeout_s)
        self.restarts = 0  # children killed and replaced (a hung agent)
        self._process: subprocess.Popen | None = None
        self._reader: Connection | None = None
        self._writer: Connection | None = None
        _LIVE.add(self)

    # ------------------------------------------------------------------ the child

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the child and wait until it has built the agent; AgentStartError with its
        traceback when it cannot (a module that does not import there)."""
        if self._process is not None:
            return
        from reinforge.import_paths import import_roots

        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        command = [sys.executable, "-c", _BOOTSTRAP.format(path=list(sys.path)), str(to_child_r), str(from_child_w), str(os.getpid())]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        try:
            self._process = subprocess.Popen(
                command, pass_fds=(to_child_r, from_child_w), start_new_session=True, env=env, stdin=subprocess.DEVNULL
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self._reader = Connection(from_child_r, writable=False)
        self._writer = Connection(to_child_w, readable=False)
        setup = {
            "sys_path": list(sys.path), "roots": import_roots(), "agent": self.spec, "params": self.params,
            "timeout_s": self.timeout_s, "concurrency": self.concurrency, "api_key": self.api_key,
        }
        try:
            self._writer.send_bytes(pickle.dumps(setup))
            if not self._reader.poll(self.start_timeout_s):
                raise AgentStartError(f"the agent process did not start within {self.start_timeout_s:g} s")
            message = pickle.loads(self._reader.recv_bytes())
        except (EOFError, OSError):
            self.kill()
            raise AgentStartError("the agent process exited during start-up") from None
        except BaseException:
            self.kill()
            raise
        if message[0] != "ready":
            self.kill()
            raise AgentStartError(f"the agent process cannot build the agent:\n{message[1]}")

    def kill(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # its own session: what the agent started too
            except (ProcessLookupError, PermissionError):
                pass
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
                pass
        for conn in (self._reader, self._writer):
            if conn is not None:
                conn.close()
        self._reader = self._writer = None

    def close(self) -> None:
        _LIVE.discard(self)
        self.kill()

    # ------------------------------------------------------------------ episodes

    def run(self, jobs: list[AgentJob], on_done: Callable[[str, AgentOutcome], None] | None = None) -> dict[str, AgentOutcome]:
        """Every job's outcome by key; `on_done(key, outcome)` is called as each one ends."""
        outcomes: dict[str, AgentOutcome] = {}

        def finish(key: str, outcome: AgentOutcome) -> None:
            outcomes[key] = outcome
            if on_done is not None:
                on_done(key, outcome)

        if not jobs:
            return outcomes
        self.start()
        started: dict[str, float] = {}
        try:
            self._writer.send_bytes(pickle.dumps([(j.key, j.task, j.base_url) for j in jobs]))
        except OSError:
            pass  # a dead child: its closed pipe is read below as a death
        while True:
            deadline = min(started.values(), default=None)
            timeout = None if deadline is None else max(0.0, deadline + self.timeout_s + self.grace_s - time.monotonic())
            message = None
            if wait([self._reader], timeout):
                try:
                    message = pickle.loads(self._reader.recv_bytes())
                except (EOFError, OSError):
                    self._abandon(jobs, outcomes, finish, "the agent process died")
                    return outcomes
            if message is None:  # an episode is past its timeout and the child is not answering
                self._abandon(jobs, outcomes, finish, f"the agent process stopped answering (an agent blocked it for more than env.agent_timeout_s={self.timeout_s:g} s + {self.grace_s:g} s): killed")
                return outcomes
            if message[0] == "started":
                started[message[1]] = time.monotonic()
            elif message[0] == "done":
                started.pop(message[1], None)
                finish(message[1], message[2])
            elif message[0] == "batch_end":
                if message[1]:  # hung sync-agent threads: a fresh child for the next rollout
                    self.kill()
                    self.restarts += 1
                return outcomes

    def _abandon(self, jobs: list[AgentJob], outcomes: dict, finish: Callable, why: str) -> None:
        self.kill()
        self.restarts += 1
        for job in jobs:
            if job.key not in outcomes:
                finish(job.key, AgentOutcome.failed("killed", why))
