"""Reward calls in worker processes that a timeout can stop: a hung or GIL-holding reward function
(a catastrophic-backtracking regex) is killed with its process, and the process replaced.

`ProcessCallPool.run(calls)` blocks until every call has a score or a `RewardCallError`, and never
longer than the calls' own timeouts allow. Calls go to `workers` processes in chunks (one pipe
round trip per chunk, since cheap verifiers cost less than a round trip); a worker answers each
call as it ends, so each call is timed on its own, from the previous answer:

- a call past `timeout_s`: its worker (and any process it started) is killed, the call fails with
  reason `timeout`, the calls of the chunk it had not reached go back to the queue, and a fresh
  worker is started;
- a worker that dies: the running call fails with `worker_died`, the rest are resent likewise;
- a worker that cannot start (a reward that fails to build, a missing module): every waiting call
  fails with that traceback, instead of waiting for a worker that never comes. `start()` starts
  the workers ahead of the first call and raises `RewardWorkerStartError` instead, which is how a
  run stops at its start when a worker cannot import a user's reward.

Workers are fresh interpreters (`python -c`, not a fork of the trainer and its OpenMP threads), in
their own session so a kill takes their children too. They die with the trainer (Linux death
signal; an atexit hook elsewhere), and `close()` kills them: no process outlives the run.
"""

from __future__ import annotations

import atexit
import collections
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

from reinforge.rewards.call_errors import (
    CALL_ERRORS,
    RewardCallError,
    RewardRaised,
    RewardTimeout,
    RewardWorkerDied,
    RewardWorkerStartError,
)
from reinforge.rewards.reward_calls import RewardCall

START_TIMEOUT_S = 120.0  # a fresh interpreter importing the reward functions, on a busy machine
MAX_CHUNK = 32

_BOOTSTRAP = "import sys; sys.path[:0] = {path!r}; from reinforge.rewards.reward_worker import main; main()"


def unsendable(what: str, err: BaseException) -> str:
    return (
        f"{what} cannot be sent to a reward worker process ({type(err).__name__}: {err}). Reward "
        "functions run in separate processes so that a timeout can stop them: name the function "
        "by `fn` + `params`, make the object picklable (a module-level function or class), or set "
        "reward.isolation=thread (then a hung call cannot be stopped)"
    )


@dataclass
class _Pending:
    index: int  # position in run()'s calls
    payload: bytes
    call: RewardCall


@dataclass
class _Worker:
    process: subprocess.Popen
    reader: Connection
    writer: Connection
    launched: float
    ready: bool = False
    chunk: collections.deque = field(default_factory=collections.deque)  # sent, unanswered; [0] runs
    call_started: float = 0.0


_LIVE_POOLS: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _kill_all_workers() -> None:
    for pool in list(_LIVE_POOLS):
        pool.close()


class ProcessCallPool:
    def __init__(self, components: dict[str, tuple], workers: int, timeout_s: float,
                 start_timeout_s: float = START_TIMEOUT_S, max_chunk: int = MAX_CHUNK):
        """`components`: name -> ("named", fn, params) or ("pickled", bytes), built in each worker."""
        if workers < 1:
            raise ValueError(f"reward workers must be >= 1, got {workers}")
        self.components = components
        self.num_workers = workers
        self.timeout_s = float(timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.max_chunk = max_chunk
        self.replacements = 0  # workers started to replace a killed or dead one
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()  # one run at a time (training scoring and evaluation may overlap)
        self._closed = False
        _LIVE_POOLS.add(self)

    # ------------------------------------------------------------------ workers

    def _launch(self) -> _Worker:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        command = [sys.executable, "-c", _BOOTSTRAP.format(path=list(sys.path)), str(to_child_r), str(from_child_w), str(os.getpid())]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # rewards need no BLAS threads
        try:
            process = subprocess.Popen(
                command, pass_fds=(to_child_r, from_child_w), start_new_session=True, env=env, stdin=subprocess.DEVNULL
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        worker = _Worker(process, Connection(from_child_r, writable=False), Connection(to_child_w, readable=False), time.monotonic())
        try:
            worker.writer.send_bytes(pickle.dumps({"sys_path": list(sys.path), "components": self.components}))
        except OSError:  # it died at once: its closed pipe reads as a failed start in _drive
            pass
        return worker

    def _kill(self, worker: _Worker) -> None:
        try:
            os.killpg(worker.process.pid, signal.SIGKILL)  # its own session: the reward's children too
        except (ProcessLookupError, PermissionError):
            pass
        try:
            worker.process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            pass
        for conn in (worker.reader, worker.writer):
            conn.close()

    def start(self) -> None:
        """Start every worker and wait until each has built the reward functions; one that cannot
        raises RewardWorkerStartError naming the component and the error (no worker is left)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the reward worker pool is closed")
            while len(self._workers) < self.num_workers:
                self._workers.append(self._launch())
            try:
                for worker in self._workers:
                    self._wait_ready(worker)
            except BaseException:
                workers, self._workers = self._workers, []
                for worker in workers:
                    self._kill(worker)
                raise

    def _wait_ready(self, worker: _Worker) -> None:
        while not worker.ready:
            left = worker.launched + self.start_timeout_s - time.monotonic()
            try:
                if left <= 0 or not worker.reader.poll(left):
                    raise RewardWorkerStartError("", f"a reward worker process did not start within {self.start_timeout_s:g} s")
                message = pickle.loads(worker.reader.recv_bytes())
            except (EOFError, OSError):
                code = worker.process.wait(timeout=10)
                raise RewardWorkerStartError("", f"a reward worker process exited during start-up (exit status {code})") from None
            if message[0] == "failed":
                _, _, component, error = message
                what = f"reward component {component!r}" if component else "the reward functions"
                raise RewardWorkerStartError(component, f"a reward worker process cannot build {what}: {error}")
            worker.ready = message[0] == "ready"

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    # ------------------------------------------------------------------ calls

    def run(self, calls: list[RewardCall]) -> list[float | list[float] | RewardCallError]:
        """Every call's value, or the RewardCallError it ended with, in order."""
        outcomes: list = [None] * len(calls)
        queue: collections.deque[_Pending] = collections.deque()
        for index, call in enumerate(calls):
            try:
                queue.append(_Pending(index, pickle.dumps(call), call))
            except Exception as err:  # noqa: BLE001 - this call's data cannot cross; the others still can
                outcomes[index] = RewardRaised(unsendable(f"the input of reward {call.component or 'verifier'!r}", err))
        with self._lock:
            if self._closed:
                raise RuntimeError("the reward worker pool is closed")
            while len(self._workers) < self.num_workers:
                self._workers.append(self._launch())
            self._drive(queue, outcomes)
        return outcomes

    def _drive(self, queue: collections.deque, outcomes: list) -> None:
        remaining = len(queue)
        while remaining:
            self._dispatch(queue)
            now = time.monotonic()
            deadlines = [self._deadline(w) for w in self._workers if not w.ready or w.chunk]
            timeout = max(0.0, min(deadlines) - now) if deadlines else None
            readable = wait([w.reader for w in self._workers], timeout)
            for worker in [w for w in self._workers if w.reader in readable]:
                remaining -= self._receive(worker, queue, outcomes)
                # Drain what else it has sent (a cheap verifier answers faster than one wait() per answer).
                while worker in self._workers and worker.chunk and self._has_message(worker):
                    remaining -= self._receive(worker, queue, outcomes)
            now = time.monotonic()
            for worker in list(self._workers):
                if now < self._deadline(worker) or (worker.ready and not worker.chunk):
                    continue
                if not worker.ready:
                    remaining -= self._start_failed(worker, queue, outcomes, f"it did not start within {self.start_timeout_s:g} s")
                    continue
                running = worker.chunk.popleft()
                outcomes[running.index] = RewardTimeout(
                    f"reward {self._label(running.call)}: timed out after {self.timeout_s:g} s (worker process killed)"
                )
                remaining -= 1
                self._replace(worker, queue)

    @staticmethod
    def _has_message(worker: _Worker) -> bool:
        try:
            return worker.reader.poll(0)
        except (OSError, EOFError):
            return True  # its death is the message: _receive handles it

    def _deadline(self, worker: _Worker) -> float:
        if not worker.ready:
            return worker.launched + self.start_timeout_s
        return worker.call_started + self.timeout_s

    def _dispatch(self, queue: collections.deque) -> None:
        idle = [w for w in self._workers if w.ready and not w.chunk]
        for n, worker in enumerate(idle):
            if not queue:
                return
            # Even shares for the idle workers, so one slow chunk does not hold the batch back.
            size = min(self.max_chunk, -(-len(queue) // (len(idle) - n)))
            chunk = [queue.popleft() for _ in range(size)]
            worker.chunk.extend(chunk)
            worker.call_started = time.monotonic()
            try:
                worker.writer.send_bytes(pickle.dumps([(p.index, p.payload) for p in chunk]))
            except OSError:  # died while idle: nothing of it ran; resend elsewhere
                worker.chunk.clear()
                queue.extendleft(reversed(chunk))
                self._replace(worker, None)

    def _receive(self, worker: _Worker, queue: collections.deque, outcomes: list) -> int:
        """Handle one message of `worker`; returns how many calls it finished."""
        try:
            message = pickle.loads(worker.reader.recv_bytes())
        except (EOFError, OSError):
            return self._died(worker, queue, outcomes)
        if message[0] == "ready":
            worker.ready = True
            return 0
        if message[0] == "failed":
            return self._start_failed(worker, queue, outcomes, f"building the reward functions failed:\n{message[1]}")
        _, call_id, ok, value = message
        running = worker.chunk.popleft()
        assert running.index == call_id, "reward worker answered out of order"
        if ok:
            outcomes[running.index] = value
        else:
            type_name, text, tb = value
            # A failure with a reason of its own (a non-number) keeps it; any other exception is `raised`.
            outcomes[running.index] = CALL_ERRORS.get(type_name, RewardRaised)(f"reward {self._label(running.call)}: {type_name}: {text}", tb)
        worker.call_started = time.monotonic()  # the next call of the chunk starts now
        return 1

    def _died(self, worker: _Worker, queue: collections.deque, outcomes: list) -> int:
        if not worker.ready:
            return self._start_failed(worker, queue, outcomes, "its process exited during start-up")
        finished = 0
        if worker.chunk:
            running = worker.chunk.popleft()
            try:
                code = worker.process.wait(timeout=5)  # its pipe closed: it is exiting, or gone
            except subprocess.TimeoutExpired:
                code = None
            how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
            outcomes[running.index] = RewardWorkerDied(
                f"reward {self._label(running.call)}: the worker process died during the call ({how})"
            )
            finished = 1
        self._replace(worker, queue)
        return finished

    def _start_failed(self, worker: _Worker, queue: collections.deque, outcomes: list, why: str) -> int:
        """A worker that cannot start will not start on a retry either: fail what waits, clearly."""
        self._kill(worker)
        self._workers.remove(worker)
        message = f"a reward worker process could not start: {why}"
        failed = 0
        if not self._workers:  # the last one: nothing will run what waits (the next run() tries again)
            while queue:
                pending = queue.popleft()
                outcomes[pending.index] = RewardWorkerDied(f"reward {self._label(pending.call)}: {message}")
                failed += 1
        return failed

    def _replace(self, worker: _Worker, queue: collections.deque | None) -> None:
        if queue is not None:
            queue.extendleft(reversed(worker.chunk))  # the calls it never reached: in order, next
        worker.chunk.clear()
        self._kill(worker)
        self._workers[self._workers.index(worker)] = self._launch()
        self.replacements += 1

    @staticmethod
    def _label(call: RewardCall) -> str:
        return "verifier" if call.method == "verify" else call.component

    def close(self) -> None:
        self._closed = True
        _LIVE_POOLS.discard(self)
        workers, self._workers = self._workers, []
        for worker in workers:
            self._kill(worker)
