"""The Engine protocol served by N Ray actors, each a `TorchEngine` over its own copy of the model
(or a `VllmEngine`, with engine.type=vllm: vLLM in a child process of each actor).

`generate` splits the batch into N contiguous shards (sizes differ by at most one; a batch smaller
than N uses fewer workers), samples them in parallel and concatenates the results in prompt order.
Shard i is sampled with its own seed: shard 0 takes `seed` itself, shard i > 0 a seed derived from
(`seed`, i). So a result is deterministic given (`seed`, N), and with N = 1 it is exactly the
in-process `TorchEngine`'s; with N > 1 the random streams differ from the in-process engine's,
so samples differ (their distribution does not).

Weights are versioned and verified (reinforge.engines.weight_sync). `sync_weights(version)` reads the
learner model's current state_dict (the engine holds a reference to that model, like `TorchEngine`;
a LoRA model's merged weights, reinforge.models.lora, which a worker's plain model of the base
architecture loads), puts each tensor in the object store as an object of its own (copied to the
host one at a time: the learner's process never holds a second full state dict) and has every
worker load them, fetching and copying one tensor at a time (`load_streamed`); each worker
echoes `(version, checksum of the weights it now holds)`, and a wrong version or checksum raises
`WeightSyncError`. Every generation carries the version that sampled it, and a generation from
another version is refused too.

Two users, one set of workers: the async producer samples through a lane (`lane()`, weights of its
own: `load_weights(state, version)`) while held-out evaluation samples through the engine with the
learner's current weights; the workers hold one set at a time and the engine serializes its users
(`SharedWeights`, reinforge.engines.weight_sync, says why).

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
from collections.abc import Callable
from typing import Any

import torch
from transformers import PreTrainedModel

from reinforge.distributed.ray_cluster import import_ray, start_ray
from reinforge.engines.base import Generation, SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.engines.weight_sync import SharedWeights, WeightSet, WeightSyncError, state_checksum
from reinforge.runtime.process_settings import configure_process

log = logging.getLogger(__name__)

LOGS_HINT = "its log is under /tmp/ray/session_latest/logs (worker-*.err); `ray status` shows the cluster"


class WorkerError(RuntimeError):
    """A Ray worker failed in a way the engine could not recover from."""


class WorkerTimeoutError(WorkerError):
    """A Ray worker did not answer within `timeout_s`."""


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


def load_streamed(model: torch.nn.Module, state: dict[str, Any]) -> None:
    """Load `state` (name -> tensor or object-store reference to one) into `model` one tensor at a
    time: fetched, copied in place, dropped. Names and shapes are checked as `load_state_dict` does."""
    import ray

    targets = model.state_dict()
    if set(state) != set(targets):
        missing, unexpected = sorted(set(targets) - set(state)), sorted(set(state) - set(targets))
        raise RuntimeError(f"weights for {type(model).__name__}: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for name, value in state.items():
            tensor = ray.get(value) if isinstance(value, ray.ObjectRef) else value
            if tensor.shape != targets[name].shape:
                raise RuntimeError(f"weights for {type(model).__name__}: {name} has shape {tuple(tensor.shape)}, the model's {tuple(targets[name].shape)}")
            targets[name].copy_(tensor)
            del tensor  # before the next one is fetched


class EngineWorker:
    """The actor body: a TorchEngine over a model rebuilt from the learner's config, or a VllmEngine
    (in its own child process of the actor) when `vllm` holds its options."""

    def __init__(
        self, config: Any, param_dtype: torch.dtype, pad_token_id: int, dtype: str, max_batch_size: int, fused: bool, threads: int,
        decode_kernels: str = "auto", vllm: dict | None = None,
    ):
        from transformers import AutoModelForCausalLM

        configure_process(threads)
        model = AutoModelForCausalLM.from_config(config).to(param_dtype).eval()
        if vllm is not None:
            from reinforge.engines.vllm_engine import VllmEngine  # vLLM is optional: imported only here

            self.engine = VllmEngine(model, pad_token_id, dtype=dtype, **vllm)
            return
        self.engine = TorchEngine(
            model, pad_token_id, dtype=dtype, max_batch_size=max_batch_size, fused=fused, decode_kernels=decode_kernels
        )

    def load_weights(self, state: dict[str, Any], version: int) -> tuple[int, str]:
        """`state`: name -> tensor, or name -> an object-store reference to one tensor (RayEngine
        ships them so: this worker fetches and loads one parameter at a time)."""
        load_streamed(self.engine.model, state)
        self.engine.sync_weights(version)
        return version, state_checksum(self.engine.model.state_dict())

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None, budgets=None, stop_when=None) -> list[Generation]:
        return self.engine.generate(prompts, params, seed=seed, budgets=budgets, stop_when=stop_when)

    def pid(self) -> int:
        return os.getpid()


class RayEngine(SharedWeights):
    """`num_workers` Ray actors behind the Engine protocol; see the module docstring."""

    supports_decode_hook = False  # a hook (rollout pruning's) reads the learner process's own models

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
        vllm: dict | None = None,
        gpus_per_worker: float = 0.0,
    ):
        """`vllm`: each worker samples with vLLM, started with these VllmEngine options (engine.type=vllm);
        `gpus_per_worker`: GPUs Ray reserves for each worker (a vLLM worker on a GPU machine needs one)."""
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
        self._init_weights()
        self.replacements = 0  # workers replaced after dying, over the engine's life
        self._worker_args = (
            model.config, next(model.parameters()).dtype, pad_token_id, dtype, max_batch_size, fused, max(1, int(cpus_per_worker)),
            decode_kernels, vllm,
        )
        self._actor_class = self.ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=0)(EngineWorker)
        self._needs_weights: set[int] = set()  # fresh actors (after a timeout) not yet given the weights
        self._actors: list[Any] = [self._spawn() for _ in range(num_workers)]
        self._starting.update(range(num_workers))
        try:
            self.sync_weights(0)
        except BaseException:
            self.close()  # no half-started workers left holding CPUs
            raise

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
        """One object per tensor, each copied to the host (from a GPU) and put on its own, so this
        process holds one parameter's host copy at a time, never a second full state dict; the
        checksum reads them one at a time again."""
        refs, put = {}, {}
        for name, tensor in state.items():
            # Tied weights (embeddings and head) are one tensor under two names: put once.
            key = (tensor.data_ptr(), tuple(tensor.shape), tensor.stride(), tensor.dtype, tensor.device)
            if key not in put:
                put[key] = self.ray.put(tensor.detach().cpu())
            refs[name] = put[key]
        return WeightSet(refs, version, state_checksum(state))

    def _push(self, weights: WeightSet) -> None:
        """Load `weights` on every worker and check each echo (the caller holds the lock)."""
        self._held = weights
        self._needs_weights.clear()  # every worker gets this version now
        try:
            calls = {i: self._actors[i].load_weights.remote(weights.payload, weights.version) for i in range(self.num_workers)}
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
            self._hold(weights)
            self._reload_stale()

            def call(i: int) -> Any:
                start, end = bounds[i]
                shard_budgets = None if budgets is None else budgets[start:end]
                return self._actors[i].generate.remote(prompts[start:end], params, shard_seed(seed, i), shard_budgets, rules[i])

            shards = self._gather({i: call(i) for i in range(len(bounds))}, "generate", redo=call)
        return self.check_versions([g for i in range(len(bounds)) for g in shards[i]], weights)

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
        ref = self._actors[worker].load_weights.remote(self._held.payload, self._held.version)
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
        ref = self._actors[worker].load_weights.remote(self._held.payload, self._held.version)
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
