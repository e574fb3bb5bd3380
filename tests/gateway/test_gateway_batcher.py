"""The Batcher on its own: grouping by sampling params, row order, seeds, engine failures."""

from __future__ import annotations

import pytest

from reinforge.engines.base import Generation, SamplingParams
from reinforge.gateway.batcher import Batcher, BatcherClosed, EngineFailure, Job, SEED_STRIDE


class RecordingEngine:
    """Returns [prompt[0]] per row; records (prompts, params, seed) per call. No `budgets` argument."""

    policy_version = 0

    def __init__(self, fail=False):
        self.calls, self.fail = [], fail

    def generate(self, prompts, params, seed=None):
        self.calls.append((prompts, params, seed))
        if self.fail:
            raise RuntimeError("out of memory")
        return [Generation([p[0]], [-1.0], "stop") for p in prompts]


def run_flush(engine, jobs, sessions, batcher_ref=None):
    batcher = Batcher(engine, window_s=60.0)
    if batcher_ref is not None:
        batcher_ref.append(batcher)
    for key in sessions:
        batcher.open_session(key)
    futures = [batcher.submit(job) for job in jobs]  # the last one completes "every session pending"
    results = [f.result(timeout=20) if not engine.fail else f.exception(timeout=20) for f in futures]
    batcher.close()
    assert not batcher.alive
    return results, batcher


def jobs(temperatures, max_tokens):
    return [Job([10 + i], n=1 + (i == 0), params=SamplingParams(max_new_tokens=m, temperature=t), order=(i + 1, 1),
                session_key=f"s{i}", seed_base=100 + i) for i, (t, m) in enumerate(zip(temperatures, max_tokens))]


def test_one_flush_makes_one_call_per_distinct_params_in_session_order_with_derived_seeds() -> None:
    engine = RecordingEngine()
    generate = engine.generate
    holds = []
    engine.generate = lambda *a, **k: (holds.append(batcher_ref[0].engine_lock.locked()), generate(*a, **k))[1]
    batcher_ref = []
    submitted = jobs([1.0, 0.5, 1.0], [4, 4, 4])
    results, batcher = run_flush(engine, list(reversed(submitted)), ["s0", "s1", "s2"], batcher_ref)
    assert holds == [True, True]  # engine calls hold the engine lock (weight syncs take it too)
    assert [[g.token_ids for g in r] for r in reversed(results)] == [[[10], [10]], [[11]], [[12]]]  # n=2 -> 2 rows
    (p1, params1, seed1), (p2, params2, seed2) = engine.calls
    assert p1 == [[10], [10], [12]] and params1.temperature == 1.0  # sorted by session open order
    assert p2 == [[11]] and params2.temperature == 0.5
    assert seed1 == 100 * SEED_STRIDE + 1 * 7919 + 0 and seed2 == 101 * SEED_STRIDE + 1 * 7919 + 1
    assert batcher.stats()["engine_calls"] == 2 and batcher.stats()["rows"] == 4


def test_engines_without_budgets_get_one_call_per_max_new_tokens() -> None:
    engine = RecordingEngine()
    run_flush(engine, jobs([1.0, 1.0], [3, 5]), ["s0", "s1"])
    assert sorted(call[1].max_new_tokens for call in engine.calls) == [3, 5]


def test_an_engine_failure_fails_every_request_of_its_call_and_closing_fails_pending_ones() -> None:
    engine = RecordingEngine(fail=True)
    errors, _ = run_flush(engine, jobs([1.0, 1.0], [3, 3]), ["s0", "s1"])
    assert all(isinstance(e, EngineFailure) and "out of memory" in str(e) for e in errors)
    batcher = Batcher(RecordingEngine(), window_s=60.0)
    batcher.open_session("a")
    batcher.open_session("b")
    pending = batcher.submit(jobs([1.0], [2])[0])
    batcher.close()
    assert isinstance(pending.exception(timeout=20), BatcherClosed)
    with pytest.raises(BatcherClosed):
        batcher.submit(jobs([1.0], [2])[0])



def test_the_window_is_a_quiet_period_and_the_oldest_request_waits_at_most_max_wait_windows() -> None:
    """The flush rule at given clock times (no sleeping): with one session silent, requests 50 ms
    apart keep the batch open past one 60 ms window from the first, until 60 ms pass with none
    arriving; requests that never pause are flushed once the oldest has waited MAX_WAIT_WINDOWS."""
    from reinforge.gateway.batcher import MAX_WAIT_WINDOWS

    batcher = Batcher(RecordingEngine(), window_s=0.06)
    for key in ("s0", "s1", "silent"):
        batcher.open_session(key)

    def ready_at(arrivals, now):
        pending = jobs([1.0] * len(arrivals), [2] * len(arrivals))
        for job, at in zip(pending, arrivals):
            job.arrived, job.session_key = at, "s0"
        with batcher._cond:  # set without notifying: the worker stays asleep, only the rule is asked
            batcher._pending = pending
            try:
                return batcher._ready(now)
            finally:
                batcher._pending = []

    burst = [0.0, 0.05, 0.10, 0.15, 0.20]
    assert not ready_at(burst, 0.25)  # 0.25 s after the first, but the last came 50 ms ago
    assert ready_at(burst, 0.26 + 1e-9)  # a window of quiet
    preparing = batcher.preparing()  # a request the server is still rendering holds the quiet flush
    assert not ready_at(burst, 0.26 + 1e-9)
    preparing.done(), preparing.done()  # idempotent
    assert ready_at(burst, 0.26 + 1e-9)
    steady = [i * 0.01 for i in range(100)]  # one every 10 ms, never quiet for a window
    limit = MAX_WAIT_WINDOWS * 0.06
    assert not ready_at([t for t in steady if t < limit], limit - 0.001)
    assert ready_at([t for t in steady if t < limit], limit)
    batcher.close()
    assert not batcher.alive
