"""Reward calls in daemon threads of the trainer's process: for what must stay in-process (stateful
rewards, whose state is checkpointed with the run; a reward model's forward; Ray proxies, whose
calls run on Ray workers with their own kill), or everything with `reward.isolation=thread`.

A call past `timeout_s` fails with reason `timeout` and its thread is abandoned (a thread cannot
be killed) and replaced, so the other calls keep their workers. The threads are daemons: an
abandoned, still-hung call never keeps the interpreter from exiting. A call that holds the GIL
cannot be stopped this way at all: that is what `ProcessCallPool` is for.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import traceback
from collections.abc import Callable, Mapping

from reinforge.rewards.call_errors import RewardCallError, RewardRaised, RewardTimeout
from reinforge.rewards.reward_calls import RewardCall, execute


class ThreadCallPool:
    def __init__(self, fns: Mapping[str, Callable], workers: int, timeout_s: float):
        if workers < 1:
            raise ValueError(f"reward workers must be >= 1, got {workers}")
        self.fns = dict(fns)
        self.num_workers = workers
        self.timeout_s = float(timeout_s)
        # Per component, where the call bounds itself (a Ray proxy: the pool's own timeout and one
        # retry on a fresh actor) and this thread's timeout is only a backstop.
        self.timeouts: dict[str, float] = {}
        self.abandoned = 0  # threads left behind in a call that timed out
        self._names = itertools.count()
        self._lock = threading.Lock()

    def _start_thread(self, calls: list[RewardCall], jobs: queue.SimpleQueue, done: queue.SimpleQueue,
                      started: dict, abandoned: set) -> None:
        def serve() -> None:
            me = threading.current_thread()
            while me not in abandoned:  # an abandoned thread whose call came back ends here
                index = jobs.get()
                if index is None:
                    return
                started[index] = (time.monotonic(), me)
                try:
                    outcome = execute(self.fns, calls[index])
                except Exception as err:  # noqa: BLE001 - recorded on the sample by the scorer
                    name = calls[index].component or "verifier"
                    # A RewardCallError keeps its reason (a Ray worker's timeout or death).
                    kind = type(err) if isinstance(err, RewardCallError) else RewardRaised
                    detail = str(err) if isinstance(err, RewardCallError) else f"{type(err).__name__}: {err}"
                    outcome = kind(f"reward {name}: {detail}", "".join(traceback.format_exception(err)))
                    outcome.__cause__ = err
                done.put((index, outcome))

        threading.Thread(target=serve, name=f"reward-{next(self._names)}", daemon=True).start()

    def run(self, calls: list[RewardCall]) -> list[float | list[float] | RewardCallError]:
        """Every call's value, or the RewardCallError it ended with, in order."""
        with self._lock:
            outcomes: list = [None] * len(calls)
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            done: queue.SimpleQueue = queue.SimpleQueue()
            started: dict[int, tuple[float, threading.Thread]] = {}
            abandoned: set[threading.Thread] = set()
            for index in range(len(calls)):
                jobs.put(index)
            threads = min(self.num_workers, len(calls))
            for _ in range(threads):
                self._start_thread(calls, jobs, done, started, abandoned)
            finished: set[int] = set()
            while len(finished) < len(calls):
                try:
                    index, outcome = done.get(timeout=0.05)
                    if index not in finished:  # else: the late answer of a call already timed out
                        outcomes[index] = outcome
                        finished.add(index)
                except queue.Empty:
                    pass
                now = time.monotonic()
                for index, (start, thread) in list(started.items()):
                    limit = self.timeouts.get(calls[index].component, self.timeout_s)
                    if index not in finished and now - start > limit:
                        outcomes[index] = RewardTimeout(
                            f"reward {calls[index].component or 'verifier'}: timed out after {limit:g} s "
                            "(its thread was abandoned: a thread cannot be stopped)"
                        )
                        finished.add(index)
                        abandoned.add(thread)
                        self.abandoned += 1
                        self._start_thread(calls, jobs, done, started, abandoned)  # the other calls keep their workers
            for _ in range(threads):
                jobs.put(None)  # idle threads end; abandoned ones end if their call ever returns
            return outcomes

    def close(self) -> None:
        """Nothing to stop: idle threads ended with their run, abandoned ones are daemons."""
