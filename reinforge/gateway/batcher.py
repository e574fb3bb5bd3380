"""Requests -> batched `engine.generate` calls, on one worker thread.

Agents call the model one request at a time, but the engine is fast only on batches. Every
request waits in a pending list (one row per choice: n rows for an `n`-choice request) and the
pending list is flushed into engine calls when:

- every open, unfinished session has a request pending (no agent is still thinking or running a
  tool, so waiting longer cannot grow the batch), or
- no request has arrived for `window_s` and none is being prepared (the burst of requests that
  follows a batch of answers is over: agents in one process send their next requests one after
  another, and the server renders each one's chat template before it is queued, so one turn's
  requests arrive spread over far more than a few milliseconds when there are many), or
- the oldest pending request has waited `MAX_WAIT_WINDOWS` windows (an agent busy in its tools
  does not hold the others back for long), or
- `max_batch` rows are pending.

A flush makes one `engine.generate` per distinct SamplingParams (per-request token budgets are
passed as `budgets` to engines that take them, TorchEngine does, so that different max_tokens
still share one call). Rows are sorted by (session open order, call index), and each call's seed
is derived from the first row's session seed and the flush counter, so a run whose agents are
deterministic batches and samples deterministically. Engines are not thread-safe: all engine
calls run on the batcher's one worker thread. An engine that raises fails every request of that
call (the server answers each with a 500 and records it on its session).

Rollout pruning: while the env sets `pruning` (reinforge.gateway.session_pruning) and the engine
takes a decode hook, each call is sampled with the hook of its rows and the pruned sessions are
reported back after it.

Per-call stats: rows, batch fill (rows / sessions open and unfinished at flush time; only for
flushes while sessions are open) and engine seconds.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from reinforge.engines.base import Generation, SamplingParams

SEED_STRIDE = 1_000_033  # a prime: seeds of different sessions / flushes do not collide in practice


# How long (in windows) a request may wait while others keep arriving: the quiet-period rule above
# measured 0.43 rows per live episode per engine call when the window ran from the oldest request
# (64 agents, 20 ms; benchmarks/gateway_throughput.py), the requests of one turn being split in two.
MAX_WAIT_WINDOWS = 10


class EngineFailure(RuntimeError):
    """The engine raised (or answered wrongly) on a batch this request was part of."""


class BatcherClosed(RuntimeError):
    """The gateway is shutting down; the request was not sampled."""


@dataclass
class Job:
    """One request: `n` rows of the same prompt, sampled with `params` (max_new_tokens = its budget)."""

    prompt_ids: list[int]
    n: int
    params: SamplingParams
    order: tuple  # (session open order, call index); plain requests after sessions, by arrival
    session_key: str | None
    seed_base: int
    future: Future = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)


@dataclass
class CallStats:
    flush: int
    rows: int
    sessions_open: int
    fill: float | None
    engine_s: float
    failed: bool


class Batcher:
    def __init__(self, engine: Any, window_s: float = 0.02, max_batch: int = 256):
        if window_s < 0:
            raise ValueError(f"window_s must be >= 0, got {window_s}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.engine, self.window_s, self.max_batch = engine, window_s, max_batch
        self._takes_budgets = _accepts(engine.generate, "budgets")
        self.pruning = None  # a SessionPruning while the env's rollout prunes (set between rollouts only)
        self._cond = threading.Condition()
        # Held during every engine call: a caller that changes the engine (sync_weights) while
        # agents may be running takes it too, so a batch never samples from half-updated weights.
        self.engine_lock = threading.Lock()
        self._pending: list[Job] = []
        self._open: set[str] = set()  # sessions open and unfinished
        self._preparing = 0  # session requests received by the server and not yet queued
        self._closed = False
        self._flushes = 0
        self.calls: deque[CallStats] = deque(maxlen=10_000)
        self.engine_calls = self.rows = 0
        self.engine_seconds = 0.0
        self._fill_sum, self._fill_count = 0.0, 0
        self._thread = threading.Thread(target=self._run, name="reinforge-gateway-engine", daemon=True)
        self._thread.start()

    # --- sessions -------------------------------------------------------------------------------
    def open_session(self, key: str) -> None:
        with self._cond:
            self._open.add(key)
            self._cond.notify_all()

    def finish_session(self, key: str) -> None:
        with self._cond:
            self._open.discard(key)
            self._cond.notify_all()  # the others may now all be pending

    # --- requests -------------------------------------------------------------------------------
    def preparing(self) -> "Preparing":
        """Count a session request from its arrival at the server until `done()` (after `submit`):
        the quiet-window flush waits for it (bounded by the max-wait rule)."""
        return Preparing(self)

    def _add_preparing(self, delta: int) -> None:
        with self._cond:
            self._preparing += delta
            self._cond.notify_all()

    def submit(self, job: Job) -> Future:
        if job.n > self.max_batch:
            raise ValueError(f"n={job.n} is more than max_batch={self.max_batch} rows")
        with self._cond:
            if self._closed:
                raise BatcherClosed("the gateway is closing")
            self._pending.append(job)
            self._cond.notify_all()
        return job.future

    def close(self, timeout: float = 30.0) -> None:
        """Stop the worker (after the engine call in flight, if any); pending requests fail."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stats(self) -> dict:
        with self._cond:
            return {
                "engine_calls": self.engine_calls, "rows": self.rows, "engine_seconds": self.engine_seconds,
                "mean_batch_fill": self._fill_sum / self._fill_count if self._fill_count else None,
                "mean_rows_per_call": self.rows / self.engine_calls if self.engine_calls else None,
            }

    # --- worker ---------------------------------------------------------------------------------
    def _ready(self, now: float) -> bool:
        rows = sum(job.n for job in self._pending)
        if rows >= self.max_batch:
            return True
        if not self._preparing and now - max(job.arrived for job in self._pending) >= self.window_s:
            return True  # quiet for a window: no more requests are on their way
        if now - min(job.arrived for job in self._pending) >= MAX_WAIT_WINDOWS * self.window_s:
            return True
        waiting = {job.session_key for job in self._pending}
        return bool(self._open) and self._open <= waiting

    def _take(self) -> list[Job]:
        jobs = sorted(self._pending, key=lambda job: job.order)
        taken, rows = [], 0
        for job in jobs:
            if rows + job.n > self.max_batch and taken:
                break
            taken.append(job)
            rows += job.n
        chosen = {id(job) for job in taken}
        self._pending = [job for job in self._pending if id(job) not in chosen]
        return taken

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        for job in self._pending:
                            job.future.set_exception(BatcherClosed("the gateway closed before this request was sampled"))
                        self._pending = []
                        return
                    now = time.monotonic()
                    if self._pending and self._ready(now):
                        break
                    timeout = None
                    if self._pending:
                        quiet = max(job.arrived for job in self._pending) + self.window_s
                        oldest = min(job.arrived for job in self._pending) + MAX_WAIT_WINDOWS * self.window_s
                        timeout = max(0.0, min(quiet, oldest) - now)
                    self._cond.wait(timeout)
                jobs = self._take()
                self._flushes += 1
                flush, sessions_open = self._flushes, len(self._open)
            self._flush(jobs, flush, sessions_open)

    def _flush(self, jobs: list[Job], flush: int, sessions_open: int) -> None:
        groups: dict[SamplingParams, list[Job]] = {}
        for job in jobs:
            key = dataclasses.replace(job.params, max_new_tokens=1) if self._takes_budgets else job.params
            groups.setdefault(key, []).append(job)
        for index, group in enumerate(groups.values()):
            self._call(group, flush, index, sessions_open)

    def _call(self, group: list[Job], flush: int, index: int, sessions_open: int) -> None:
        prompts = [job.prompt_ids for job in group for _ in range(job.n)]
        budgets = [job.params.max_new_tokens for job in group for _ in range(job.n)]
        params = dataclasses.replace(group[0].params, max_new_tokens=max(budgets))
        seed = (group[0].seed_base * SEED_STRIDE + flush * 7919 + index) % (2**63)
        kwargs = {"budgets": budgets} if self._takes_budgets and len(set(budgets)) > 1 else {}
        pruning = self.pruning if getattr(self.engine, "supports_decode_hook", False) else None
        keys = [job.session_key for job in group for _ in range(job.n)]
        if pruning is not None and (hook := pruning.hook_for(keys)) is not None:
            kwargs["decode_hook"] = hook
        start = time.perf_counter()
        failure: str | None = None
        try:
            with self.engine_lock:
                generations = self.engine.generate(prompts, params, seed=seed, **kwargs)
            if not isinstance(generations, list) or len(generations) != len(prompts) or not all(
                isinstance(g, Generation) and g.token_ids for g in generations
            ):
                raise EngineFailure(f"the engine returned {type(generations).__name__} of "
                                    f"{len(generations) if hasattr(generations, '__len__') else '?'} generations "
                                    f"for {len(prompts)} prompts (each needs at least one token)")
            if "decode_hook" in kwargs:
                pruning.observe(keys, generations)
        except Exception as err:  # any engine failure answers every request of the call
            failure = f"{type(err).__name__}: {err}"
        seconds = time.perf_counter() - start
        fill = len(prompts) / sessions_open if sessions_open else None
        with self._cond:
            self.engine_calls += 1
            self.rows += len(prompts)
            self.engine_seconds += seconds
            if fill is not None:
                self._fill_sum += fill
                self._fill_count += 1
            self.calls.append(CallStats(flush, len(prompts), sessions_open, fill, seconds, failure is not None))
        row = 0
        for job in group:
            if failure is not None:
                job.future.set_exception(EngineFailure(failure))
            else:
                job.future.set_result(generations[row: row + job.n])
            row += job.n


class Preparing:
    """One session request being prepared (see Batcher.preparing); `done()` is idempotent."""

    def __init__(self, batcher: Batcher):
        self.batcher, self.open = batcher, True
        batcher._add_preparing(1)

    def done(self) -> None:
        if self.open:
            self.open = False
            self.batcher._add_preparing(-1)


def _accepts(fn: Any, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
