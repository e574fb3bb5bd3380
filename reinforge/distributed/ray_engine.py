"""The Engine protocol served by N Ray actors, each a `TorchEngine` over its own copy of the model.

`generate` splits the batch into N contiguous shards (sizes differ by at most one; a batch smaller
than N uses fewer workers), samples them in parallel and concatenates the results in prompt order.
Shard i is sampled with its own seed: shard 0 takes `seed` itself, shard i > 0 a seed derived from
(`seed`, i). So a result is deterministic given (`seed`, N), and with N = 1 it is exactly the
in-process `TorchEngine`'s; with N > 1 the random streams differ from the in-process engine's,
so samples differ (their distribution does not).

Weights are versioned and verified. `sync_weights(version)` reads the learner model's current
state_dict (the engine holds a reference to that model, like `TorchEngine`; a LoRA model's merged
weights, reinforge.models.lora, which a worker's plain model of the base architecture loads), puts it once in the
object store and has every worker load it; each worker echoes `(version, checksum of the weights
it now holds)`, and a wrong version or checksum raises `WeightSyncError`. Every generation carries
the version that sampled it, and a generation from another version is refused too.

Two users, one set of workers. The async rollout schedule samples training batches with older
weights than the learner's (a producer thread), while the loop's held-out evaluation samples with
the learner's current weights through this same engine. `lane()` gives the producer its own view
of the workers with its own weights (`RayLane.load_weights(state, version)`, versioned and
verified like a sync). The workers hold one set of weights at a time, so every call runs under
one lock and first loads its caller's weights if the workers hold another set (same version and
checksum: nothing to load). Serializing is the simplest correct design here: the loop evaluates
through the engine it was given, and evaluation is rare (`eval.every`), so a switch costs at most
two weight loads per evaluation, while a second, local engine for evaluation would sample it with
other random streams than a sync run with the same workers. `stage_weights(version)` snapshots
the learner's weights without loading them (the async schedule's publish: the producer, not the
learner, decides when the workers are busy).

Partial rollouts: `generate` forwards per-row token `budgets` and a `stop_when` rule to the
workers. One worker gets the rule as it is (so it reproduces `TorchEngine` exactly); over several
workers the rule must split into per-worker rules over whole groups (`split(workers)`, see
`reinforge.rollout.partial.GroupQuota`): each worker stops once its own quota is met.

Nothing hangs: every wait on a worker has a deadline (`timeout_s`); a worker still busy then is
killed and the call raises `WorkerTimeoutError`. A fresh actor's first call (its process imports
torch and transformers and builds the model before it answers) waits `startup_timeout_s` instead,
so a tight call deadline does not fail a slow start on a busy machine. A worker that dies (killed, out of memory, node
lost) is replaced once: a new actor is started, given the current weights and retried on the
shard it lost; if the replacement fails too, the call raises `WorkerError` naming the worker.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel

from reinforge.distributed.ray_cluster import import_ray, start_ray
from reinforge.engines.base import Generation, SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.models.lora import merged_state_dict
from reinforge.run.process_settings import configure_process

log = logging.getLogger(__name__)

LOGS_HINT = "its log is under /tmp/ray/session_latest/logs (worker-*.err); `ray status` shows the cluster"


class WorkerError(RuntimeError):
    """A Ray worker failed in a way the engine could not recover from."""


class WorkerTimeoutError(WorkerError):
    """A Ray worker did not answer within `timeout_s`."""


class WeightSyncError(WorkerError):
    """A worker holds other weights (version or checksum) than the learner sent."""


def state_checksum(state: dict[str, torch.Tensor]) -> str:
    """BLAKE2b over every tensor's name, dtype, shape and bytes, in state_dict order."""
    digest = hashlib.blake2b(digest_size=16)
    for name, tensor in state.items():
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()


@dataclass(frozen=True)
class WeightSet:
    """One set of weights in the object store: what a worker loads, and what it must echo."""

    ref: Any  # ObjectRef of the state_dict
    version: int
    checksum: str

    def same(self, other: WeightSet | None) -> bool:
        return other is not None and (self.version, self.checksum) == (other.version, other.checksum)


def shard_bounds(n: int, workers: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) shards of n items over at most `workers` shards, none empty."""
    shards = min(n, workers)
    base, extra = divmod(n, shards) if shards else (0, 0)
    bounds, start = [], 0
    for i in range(shards):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


def shard_seed(seed: int | None, shard: int) -> int | None:
    """Shard 0 keeps `seed` (so one worker reproduces TorchEngine); others get a derived seed."""
    if seed is None or shard == 0:
        return seed
    digest = hashlib.blake2b(f"{seed}:{shard}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # torch.manual_seed takes < 2**63


class EngineWorker:
    """The actor body: a TorchEngine over a model rebuilt from the learner's config."""

    def __init__(
        self, config: Any, param_dtype: torch.dtype, pad_token_id: int, dtype: str, max_batch_size: int, fused: bool, threads: int,
        decode_kernels: str = "auto",
    ):
        from transformers import AutoModelForCausalLM

        configure_process(threads)
        model = AutoModelForCausalLM.from_config(config).to(param_dtype).eval()
        self.engine = TorchEngine(
            model, pad_token_id, dtype=dtype, max_batch_size=max_batch_size, fused=fused, decode_kernels=decode_kernels
        )

    def load_weights(self, state: dict[str, torch.Tensor], version: int) -> tuple[int, str]:
        self.engine.model.load_state_dict(state)
        self.engine.sync_weights(version)
        return version, state_checksum(self.engine.model.state_dict())

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None, budgets=None, stop_when=None) -> list[Generation]:
        return self.engine.generate(prompts, params, seed=seed, budgets=budgets, stop_when=stop_when)

    def pid(self) -> int:
        return os.getpid()


class RayEngine:
    """`num_workers` Ray actors behind the Engine protocol; see the module docstring."""

    def __init__(
        self,
        model: PreTrainedModel,
        pad_token_id: int,
        num_workers: int,
        dtype: str = "float32",
        max_batch_size: int = 512,
        fused: bool = True,
        timeout_s: float = 300.0,
        address: str | None = None,
        cpus_per_worker: float = 1.0,
        decode_kernels: str = "auto",
        startup_timeout_s: float | None = None,
    ):
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if startup_timeout_s is not None and startup_timeout_s <= 0:
            raise ValueError(f"startup_timeout_s must be positive, got {startup_timeout_s}")
        self.ray = import_ray()
        start_ray(address)
        self.model = model
        self.num_workers = num_workers
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = self.timeout_s if startup_timeout_s is None else float(startup_timeout_s)
        self._starting: set[int] = set()  # workers whose actor has not answered a call yet
        self.cpus_per_worker = cpus_per_worker
        self.policy_version = 0
        self.replacements = 0  # workers replaced after dying, over the engine's life
        self._worker_args = (
            model.config, next(model.parameters()).dtype, pad_token_id, dtype, max_batch_size, fused, max(1, int(cpus_per_worker)),
            decode_kernels,
        )
        self._actor_class = self.ray.remote(num_cpus=cpus_per_worker, max_restarts=0)(EngineWorker)
        self._lock = threading.RLock()  # one caller at a time on the workers (evaluation vs the async producer)
        self._mine: WeightSet | None = None  # the weights this engine's own `generate` samples with
        self._held: WeightSet | None = None  # what the workers hold (kept for replacements)
        self._needs_weights: set[int] = set()  # fresh actors (after a timeout) not yet given the weights
        self._actors: list[Any] = [self._spawn() for _ in range(num_workers)]
        self._starting.update(range(num_workers))
        try:
            self.sync_weights(0)
        except BaseException:
            self.close()  # no half-started workers left holding CPUs
            raise

    # ------------------------------------------------------------------ the Engine protocol

    def sync_weights(self, version: int) -> None:
        """Take the learner model's current weights as `version` and load them on every worker now."""
        self.stage_weights(version)
        with self._lock:
            self._push(self._mine)

    def stage_weights(self, version: int) -> None:
        """Take the learner model's current weights as `version`; the workers load them when this
        engine next samples (another caller may be using the workers meanwhile)."""
        self._mine = self._put(merged_state_dict(self.model), version)  # a LoRA policy's merged weights
        self.policy_version = version

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seed: int | None = None,
        budgets: list[int] | None = None,
        stop_when: Callable | None = None,
    ) -> list[Generation]:
        """As `TorchEngine.generate` (`budgets`, `stop_when`: see the module docstring)."""
        return self._generate(self._mine, prompts, params, seed, budgets, stop_when)

    def lane(self) -> RayLane:
        """Another user of these workers, with weights of its own (the async rollout producer)."""
        return RayLane(self)

    # ------------------------------------------------------------------ lifecycle

    def worker_pids(self) -> list[int]:
        """The process id of each worker, in shard order (for tests and diagnostics)."""
        pids = self._gather({i: a.pid.remote() for i, a in enumerate(self._actors)}, "pid", redo=None)
        return [pids[i] for i in range(self.num_workers)]

    def actors(self) -> list[Any]:
        """The actor handles, in shard order (for tests and diagnostics)."""
        return list(self._actors)

    def close(self) -> None:
        """Stop the workers (the Ray cluster itself stays up: `ray_cluster.stop_ray`)."""
        for actor in self._actors:
            self._kill(actor)
        self._actors = []
        self._mine = self._held = None

    def __enter__(self) -> "RayEngine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _put(self, state: dict[str, torch.Tensor], version: int) -> WeightSet:
        state = {name: tensor.detach().cpu() for name, tensor in state.items()}
        return WeightSet(self.ray.put(state), version, state_checksum(state))

    def _push(self, weights: WeightSet | None) -> None:
        """Load `weights` on every worker and check each echo (the caller holds the lock)."""
        if weights is None:
            raise WeightSyncError("no weights to load: sync_weights was never called")
        self._held = weights
        self._needs_weights.clear()  # every worker gets this version now
        try:
            calls = {i: self._actors[i].load_weights.remote(weights.ref, weights.version) for i in range(self.num_workers)}
            echoes = self._gather(calls, f"weight sync to version {weights.version}", redo=None)
            for i, echo in echoes.items():
                self._verify(i, echo)
        except BaseException:
            self._held = None  # unknown: the next call loads its weights again
            raise

    def _generate(
        self,
        weights: WeightSet | None,
        prompts: list[list[int]],
        params: SamplingParams,
        seed: int | None,
        budgets: list[int] | None,
        stop_when: Callable | None,
    ) -> list[Generation]:
        if not prompts:
            return []
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if budgets is not None and len(budgets) != len(prompts):
            raise ValueError("budgets needs one positive token budget per prompt")
        rules: list[Callable | None]
        if stop_when is None or min(len(prompts), self.num_workers) == 1:
            bounds = shard_bounds(len(prompts), self.num_workers)
            rules = [stop_when] * len(bounds)
        elif hasattr(stop_when, "split"):  # whole groups per worker, each with its own quota
            parts = stop_when.split(self.num_workers)
            bounds, rules = [(a, b) for a, b, _ in parts], [rule for _, _, rule in parts]
        else:
            raise ValueError(
                f"stop_when over {self.num_workers} workers needs a rule that splits per worker (a `split(workers)` "
                "method, as reinforge.rollout.partial.GroupQuota has): a plain callable sees only one worker's rows"
            )
        with self._lock:
            if weights is None or not weights.same(self._held):
                self._push(weights)
            self._reload_stale()

            def call(i: int) -> Any:
                start, end = bounds[i]
                shard_budgets = None if budgets is None else budgets[start:end]
                return self._actors[i].generate.remote(prompts[start:end], params, shard_seed(seed, i), shard_budgets, rules[i])

            shards = self._gather({i: call(i) for i in range(len(bounds))}, "generate", redo=call)
        results = [g for i in range(len(bounds)) for g in shards[i]]
        stale = {g.policy_version for g in results} - {weights.version}
        if stale:
            raise WeightSyncError(
                f"workers sampled with policy version(s) {sorted(stale)} but the engine is at {weights.version}"
            )
        return results

    def _spawn(self) -> Any:
        return self._actor_class.remote(*self._worker_args)

    def _kill(self, actor: Any) -> None:
        try:
            self.ray.kill(actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already dead or the cluster is gone: nothing to stop
            pass

    def _verify(self, worker: int, echo: tuple[int, str]) -> None:
        version, checksum = echo
        sent = self._held
        if sent is None or version != sent.version or checksum != sent.checksum:
            raise WeightSyncError(
                f"rollout worker {worker} echoed weights (version {version}, checksum {checksum}) but the learner sent "
                f"(version {sent and sent.version}, checksum {sent and sent.checksum}); its model differs from the learner's "
                "(another model class or dtype on the worker?)"
            )

    def _replace(self, worker: int) -> tuple[int, str]:
        """Kill worker `worker`, start a new actor in its place and give it the current weights."""
        self._kill(self._actors[worker])
        self._actors[worker] = self._spawn()
        self._starting.add(worker)
        self.replacements += 1
        ref = self._actors[worker].load_weights.remote(self._held.ref, self._held.version)
        self._wait({worker: ref}, "a restart with the current weights")
        echo = self.ray.get(ref, timeout=self.timeout_s)
        self._verify(worker, echo)
        self._needs_weights.discard(worker)
        return echo

    def _wait(self, calls: dict[int, Any], what: str) -> None:
        """Wait until every call (worker -> ObjectRef) has an outcome, at most `timeout_s` (or
        `startup_timeout_s` when a call is a fresh actor's first). Workers still busy then are killed
        and replaced by fresh actors (given the weights before their next call), and
        WorkerTimeoutError is raised."""
        refs = list(calls.values())
        starting = any(i in self._starting for i in calls)
        deadline = self.startup_timeout_s if starting else self.timeout_s
        key = "workers.startup_timeout_s" if starting and deadline != self.timeout_s else "workers.timeout_s"
        _, not_ready = self.ray.wait(refs, num_returns=len(refs), timeout=deadline)
        if not not_ready:
            self._starting.difference_update(calls)
            return
        late = [i for i, ref in calls.items() if any(ref == r for r in not_ready)]
        self._starting.difference_update(calls)
        for i in late:
            self._kill(self._actors[i])
            self._actors[i] = self._spawn()
            self._starting.add(i)
            self._needs_weights.add(i)
        raise WorkerTimeoutError(
            f"rollout worker(s) {late} did not finish {what} within {deadline:g} s ({key}). "
            f"{self._capacity_hint()} The stuck workers were stopped; {LOGS_HINT}."
        )

    def _gather(self, calls: dict[int, Any], what: str, redo: Callable[[int], Any] | None) -> dict[int, Any]:
        """Results of `calls`. A worker that died is replaced once; its call is then redone with
        `redo(worker)`, or, when `redo` is None (a weight sync), the replacement's load is the answer."""
        from ray.exceptions import RayActorError, WorkerCrashedError

        self._wait(calls, what)
        results: dict[int, Any] = {}
        for i, ref in calls.items():
            try:
                results[i] = self.ray.get(ref, timeout=self.timeout_s)
            except (RayActorError, WorkerCrashedError) as err:
                log.warning("rollout worker %d died during %s (%s); starting a replacement", i, what, type(err).__name__)
                results[i] = self._retry(i, what, redo, err)
        return results

    def _retry(self, worker: int, what: str, redo: Callable[[int], Any] | None, first: BaseException) -> Any:
        from ray.exceptions import RayActorError, WorkerCrashedError

        try:
            echo = self._replace(worker)
            if redo is None:
                return echo
            ref = redo(worker)
            self._wait({worker: ref}, f"{what} (retried on a replacement)")
            return self.ray.get(ref, timeout=self.timeout_s)
        except (RayActorError, WorkerCrashedError) as err:
            raise WorkerError(
                f"rollout worker {worker} died during {what} ({type(first).__name__}), and so did its replacement "
                f"({type(err).__name__}). Check the workers' memory (each holds a copy of the model) and whether "
                f"something kills Ray processes; {LOGS_HINT}. Cause: {err}"
            ) from err

    def _reload_stale(self) -> None:
        """Give actors started after a timeout the current weights before they are used."""
        for worker in sorted(self._needs_weights):
            self._load_current_weights(worker)

    def _load_current_weights(self, worker: int) -> None:
        ref = self._actors[worker].load_weights.remote(self._held.ref, self._held.version)
        echo = self._gather({worker: ref}, "loading the current weights", redo=None)[worker]
        self._verify(worker, echo)
        self._needs_weights.discard(worker)

    def _capacity_hint(self) -> str:
        try:
            total = self.ray.cluster_resources().get("CPU", 0)
            free = self.ray.available_resources().get("CPU", 0)
        except Exception:  # noqa: BLE001 - only a hint
            return ""
        need = self.num_workers * self.cpus_per_worker
        return (
            f"Each worker needs {self.cpus_per_worker:g} CPU ({need:g} for {self.num_workers}); the cluster has "
            f"{total:g} CPUs, {free:g} free: a worker that gets no CPU never starts (other actors holding CPUs?). "
            "If the cluster has room, a batch may simply need longer: raise workers.timeout_s."
        )


class RayLane:
    """A view of a RayEngine's workers with weights of its own: the async rollout producer's
    engine. `load_weights` ships a weight snapshot (versioned and verified like a sync); `generate`
    samples with it, loading it again first if the workers meanwhile served the engine's other
    user (held-out evaluation, with the learner's current weights)."""

    def __init__(self, engine: RayEngine):
        self.owner = engine
        self.policy_version = engine.policy_version
        self._weights: WeightSet | None = engine._mine

    def load_weights(self, state: dict[str, torch.Tensor], version: int) -> None:
        weights = self.owner._put(state, version)
        with self.owner._lock:
            if not weights.same(self.owner._held):
                self.owner._push(weights)
        self._weights, self.policy_version = weights, version

    def sync_weights(self, version: int) -> None:
        raise TypeError("a RayLane holds weight snapshots, not the learner's live model: use load_weights(state, version)")

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seed: int | None = None,
        budgets: list[int] | None = None,
        stop_when: Callable | None = None,
    ) -> list[Generation]:
        return self.owner._generate(self._weights, prompts, params, seed, budgets, stop_when)
