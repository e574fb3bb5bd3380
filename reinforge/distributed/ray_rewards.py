"""Reward functions served by a pool of Ray actors, behind the scorer the trainer already uses.

The `RewardScorer` stays in the trainer's process and keeps everything that is about the whole
batch: its thread pool and per-call timeout, the cache, gates and combination, the error count,
`max_error_fraction` and the metrics. Only the calls of the reward functions move: each component's
function is replaced by a `RemoteRewardFn` proxy whose call runs the real function (built from the
config by name, inside the actor) on one of N Ray actors, whichever is free (one call per actor at
a time). With `reward.workers` scorer threads waiting on N actors, up to min(reward.workers, N)
calls run at once, on any node.

Stateful reward functions (those with `state_dict`, e.g. `code_tests_difficulty`, whose weights
learn from every call) stay in-process: their state must be one, and checkpointed with the run.

A user's reward named by import path is imported in every actor from the trainer's import roots
(its current directory and the recipe's, `reinforge.import_paths`), whatever the actor's own
working directory. Every actor reports at start whether it built every component: one that
cannot (the user's module does not import on its node) stops the pool there with its error
(`RewardWorkerStartError`, which the trainer turns into a config error naming the component),
and every actor is killed, so none is left behind.

Nothing hangs: every call waits at most `timeout_s`; a worker that does not answer in time is
killed and replaced (the call fails, and the scorer records it on the sample as any reward error).
A worker that died is replaced once and the call retried; if the replacement fails too, the call
raises `WorkerError` naming the worker, which the scorer records (and past
`reward.max_error_fraction` of a batch, the run stops with that message).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Any

from reinforge.distributed.ray_cluster import import_ray, start_ray
from reinforge.distributed.ray_engine import LOGS_HINT, WorkerError, WorkerTimeoutError
from reinforge.import_paths import import_roots
from reinforge.rewards.call_errors import RewardTimeout, RewardWorkerDied, RewardWorkerStartError
from reinforge.rewards.process_pool import ProcessCallPool
from reinforge.rewards.reward_calls import RewardCall
from reinforge.rewards.scorer import NamedReward, RewardScorer

log = logging.getLogger(__name__)


class RewardWorker:
    """The actor body: every reward component built from (name, fn, params), called by name; a
    user's function named by import path is imported here from the trainer's `roots`.

    A component that cannot be built here (the user's module does not import on this worker) does
    not kill the actor: its error is kept and returned by `start_error`, which the pool asks every
    actor at start, so the run stops there with that message instead of a Ray traceback."""

    def __init__(self, specs: list[tuple[str, str, dict[str, Any]]], roots: list[str] = ()):
        from reinforge.import_paths import use_import_roots
        from reinforge.rewards.builtin import build_component

        use_import_roots(list(roots))
        self.roots = list(roots)
        self.fns: dict[str, Any] = {}
        self.groups: dict[str, bool] = {}
        self.failure: tuple[str, str] | None = None  # (component, error)
        for name, fn, params in specs:
            try:
                self.fns[name], self.groups[name] = build_component(fn, params)
            except Exception as err:  # noqa: BLE001 - any error building a reward: reported, not raised
                # An ImportPathError already says what failed and where; other errors need their type.
                self.failure = (name, str(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {err}")
                return

    def start_error(self) -> tuple[str, str] | None:
        """(component, why this worker cannot build it, with where it looked for user code), or
        None when every component is built."""
        if self.failure is None:
            return None
        import socket

        name, error = self.failure
        return name, (
            f"a Ray reward worker (node {socket.gethostname()}, pid {os.getpid()}, working directory {os.getcwd()}) "
            f"cannot build reward component {name!r}: {error}. The workers import user code from the trainer's "
            f"directories ({', '.join(self.roots) or 'none'}) and their own sys.path; on another node the code "
            "must be there too (at the same path, or installed with pip)"
        )

    def describe(self) -> dict[str, dict[str, Any]]:
        return {
            name: {
                "group": self.groups[name],
                "batched": callable(getattr(fn, "score_batch", None)),
                "deterministic": bool(getattr(fn, "deterministic", True)),
                "mean_metric": getattr(fn, "mean_metric", None),
                "stateful": hasattr(fn, "state_dict"),
            }
            for name, fn in self.fns.items()
        }

    def call(self, name: str, task: Any, item: Any) -> Any:
        self._check_started()
        return self.fns[name](task, item)

    def call_batch(self, name: str, tasks: list, trajectories: list) -> list[float]:
        self._check_started()
        return self.fns[name].score_batch(tasks, trajectories)

    def _check_started(self) -> None:
        if self.failure is not None:  # a replacement that could not build what the first workers did
            raise RuntimeError(self.start_error()[1])

    def pid(self) -> int:
        return os.getpid()


class RewardWorkerPool:
    """N RewardWorker actors; `call` runs on the next one (thread-safe), under a deadline."""

    def __init__(
        self,
        specs: list[tuple[str, str, dict[str, Any]]],
        num_workers: int,
        timeout_s: float,
        start_timeout_s: float = 300.0,
        address: str | None = None,
        cpus_per_worker: float = 1.0,
    ):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.ray = import_ray()
        start_ray(address)
        self.specs = specs
        self.timeout_s = float(timeout_s)  # one call
        self.start_timeout_s = float(start_timeout_s)  # a call on a fresh actor, which imports and builds first
        self.replacements = 0
        self._lock = threading.Lock()
        self._started: list[Any] = []  # actors that have answered once (a handle is not hashable)
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()  # indices of actors without a call
        for worker in range(num_workers):
            self._free.put(worker)
        self._actor_class = self.ray.remote(num_cpus=cpus_per_worker, max_restarts=0)(RewardWorker)
        self._roots = import_roots()  # where the trainer imports user code from: the actors import it there too
        self._actors = [self._actor_class.remote(specs, self._roots) for _ in range(num_workers)]
        try:
            self._start_all()
            self.description: dict[str, dict[str, Any]] = self._run(0, "describe", ())
        except BaseException:
            self.close()
            raise

    def _start_all(self) -> None:
        """Wait until every actor has built every component: one that cannot (a user's module that
        does not import there) stops the run now, with its error, not at its first call."""
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            errors = self.ray.get([actor.start_error.remote() for actor in self._actors], timeout=self.start_timeout_s)
        except GetTimeoutError:
            raise WorkerTimeoutError(
                f"the {len(self._actors)} reward workers did not start within {self.start_timeout_s:g} s "
                "(workers.startup_timeout_s, by default workers.timeout_s) "
                f"(importing and building the reward functions); {LOGS_HINT}"
            ) from None
        except RayActorError as err:
            raise WorkerError(f"a reward worker died while starting (importing and building the reward functions); {LOGS_HINT}. Cause: {err}") from None
        failed = next((e for e in errors if e is not None), None)
        if failed is not None:
            raise RewardWorkerStartError(*failed)
        self._started.extend(self._actors)

    def call(self, method: str, *args: Any) -> Any:
        """Run on a free actor, waiting for one: an actor runs one call at a time, so a call's
        timeout is its own, never the time spent queued behind a hung call on the same actor
        (which would count a sample that never hung as a timeout)."""
        worker = self._free.get()
        try:
            return self._run(worker, method, args)
        finally:
            self._free.put(worker)

    def _run(self, worker: int, method: str, args: tuple) -> Any:
        from ray.exceptions import GetTimeoutError, RayActorError, WorkerCrashedError

        for attempt in (0, 1):
            actor = self._actors[worker]
            timeout = self.timeout_s
            try:
                if actor not in self._started:
                    # A replacement imports and builds first: that gets the start deadline, and
                    # the call itself the call deadline, as on any other actor.
                    timeout = self.start_timeout_s
                    self.ray.get(actor.pid.remote(), timeout=timeout)
                    self._started.append(actor)
                    timeout = self.timeout_s
                ref = getattr(actor, method).remote(*args)
                return self.ray.get(ref, timeout=timeout)
            except GetTimeoutError:
                self._replace(worker, actor)  # stuck: kill it, so the next call gets a working one
                raise WorkerTimeoutError(
                    f"reward worker {worker} did not answer a {method} call within {timeout:g} s; it was replaced. "
                    f"{LOGS_HINT}"
                ) from None
            except (RayActorError, WorkerCrashedError) as err:
                if attempt == 1:
                    raise WorkerError(
                        f"reward worker {worker} died during {method}, and so did its replacement "
                        f"({type(err).__name__}). Check the workers' memory and the reward functions' "
                        f"native code; {LOGS_HINT}. Cause: {err}"
                    ) from err
                log.warning("reward worker %d died (%s); starting a replacement", worker, type(err).__name__)
                self._replace(worker, actor)
        raise AssertionError("unreachable")

    def _replace(self, worker: int, dead: Any) -> bool:
        """Kill `dead` and start a new actor in its place; False when another thread already did."""
        with self._lock:
            if self._actors[worker] is not dead:  # another thread replaced it already
                return False
            try:
                self.ray.kill(dead, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self._actors[worker] = self._actor_class.remote(self.specs, self._roots)
            self.replacements += 1
            return True

    def actors(self) -> list[Any]:
        return list(self._actors)

    def close(self) -> None:
        for actor in self._actors:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone or the cluster is down
                pass
        self._actors = []


class RemoteRewardFn:
    """A reward fn (per-sample or group) whose calls run in the pool; carries the real fn's flags."""

    def __init__(self, pool: RewardWorkerPool, name: str):
        info = pool.description[name]
        self.pool = pool
        self.name = name
        self.deterministic = info["deterministic"]
        if info["mean_metric"]:
            self.mean_metric = info["mean_metric"]

    def __call__(self, task, item):
        return as_reward_failure(self.pool.call, "call", self.name, task, item)


class RemoteBatchedRewardFn(RemoteRewardFn):
    """...that also scores a whole batch in one call (`score_batch`), e.g. a reward model."""

    def score_batch(self, tasks, trajectories):
        return as_reward_failure(self.pool.call, "call_batch", self.name, tasks, trajectories)


def as_reward_failure(call, *args: Any) -> Any:
    """A Ray worker's timeout or death, as the reason the scorer counts (as in-process scoring does)."""
    try:
        return call(*args)
    except WorkerTimeoutError as err:
        raise RewardTimeout(str(err)) from err
    except WorkerError as err:
        raise RewardWorkerDied(str(err)) from err


class RayRewardScorer(RewardScorer):
    """A RewardScorer whose stateless components run in a RewardWorkerPool; `close` stops the pool.

    The scorer's side runs in threads (`isolation="thread"`): each thread only waits on a Ray call,
    which the pool itself bounds and kills. Evaluation's verifier calls run in a local worker
    process pool (killable, like in-process scoring); failures keep the same reasons (timeout,
    worker_died, raised)."""

    def __init__(self, components: list[NamedReward], pool: RewardWorkerPool, **kwargs: Any):
        kwargs["isolation"] = "thread"
        super().__init__(components, **kwargs)
        self.pool = pool
        # The pool bounds its calls itself (timeout, then one retry on a fresh actor when the call
        # only waited behind a hung one): the scorer's thread timeout must not cut that retry short.
        backstop = pool.timeout_s + pool.start_timeout_s + 5.0
        for c in components:
            if isinstance(c.fn, RemoteRewardFn):
                self._threads.timeouts[c.name] = backstop
        # Evaluation's verifier calls run in local worker processes, which a timeout can kill.
        self._verify_pool = ProcessCallPool({}, self.workers, self.timeout_s)

    def verify_responses(self, tasks, responses):
        return self._verify_pool.run([RewardCall("", "verify", (t, r)) for t, r in zip(tasks, responses)])

    def close(self) -> None:
        super().close()
        self._verify_pool.close()
        self.pool.close()


def build_ray_scorer(
    components: list[tuple[str, str, float, dict[str, Any]]],
    num_workers: int,
    call_timeout_s: float,
    start_timeout_s: float = 300.0,
    address: str | None = None,
    cpus_per_worker: float = 1.0,
    **scorer_kwargs: Any,
) -> RayRewardScorer:
    """`components` as (name, fn, weight, params), the scorer's own arguments as keywords.
    `call_timeout_s` bounds one reward call (use the scorer's timeout_s), `start_timeout_s` the
    first call on a fresh actor (imports and builds the reward functions)."""
    from reinforge.rewards.builtin import build_component

    pool = RewardWorkerPool(
        [(name, fn, params) for name, fn, _, params in components], num_workers, call_timeout_s, start_timeout_s,
        address, cpus_per_worker,
    )
    named = []
    for name, fn, weight, params in components:
        info = pool.description[name]
        if info["stateful"]:  # its state must stay one and be checkpointed: score it here
            local, group = build_component(fn, params)
            named.append(NamedReward(name, local, weight, group=group))
            continue
        proxy = (RemoteBatchedRewardFn if info["batched"] else RemoteRewardFn)(pool, name)
        named.append(NamedReward(name, proxy, weight, group=info["group"]))
    try:
        return RayRewardScorer(named, pool, **scorer_kwargs)
    except BaseException:
        pool.close()
        raise
