"""A data-parallel learner group for `reinforge train` (`workers.learners = N > 1`).

Rank 0 is the training process itself: it runs the whole RL loop (rollout, rewards, reference,
advantages, evaluation, checkpoints) and its learner is a `DriverLearner`. Ranks 1..N-1 are
follower processes started here (or Ray actors on a cluster: reinforge.distributed.ray_learners); each holds a copy of the policy (under LoRA, the same adapters on
the same frozen base: `FollowerSpec.lora`) and its own AdamW and does one
thing: wait for a batch, train on its shard, repeat. `DriverLearner.train_step(batch)` sends the
whole mini-batch to the followers (one `broadcast_object_list`), trains on its own shard, and the
gradient all-reduce inside `DataParallelPolicyLearner` makes every rank take the same step as a
single process on the whole batch (reinforge.distributed.ddp). The RL loop does not know.

Several trainable policies (`policies:`) share the group: every rank holds one learner per
policy, each with its own model and AdamW, and a broadcast names the policy whose mini-batch it
carries. One group, not one per policy: a process joins one default process group, and the N
ranks (N GPUs, rank r on cuda:r) are the run's, whatever the number of policies. The loop trains
the policies one after another, so every rank meets the same collectives in the same order.
A policy's critic (critic.enabled) is trained by the group too, replicated or sharded as the
policy: rank 0 sends its mini-batches the same way (reinforge.distributed.critic_group).

State the loop restores on rank 0 after the learner exists (a resumed run's optimizer moments and
weights) reaches the followers with the first batch: rank 0 sends its weights, optimizer state and
version once, so every rank starts the first update from the same state. A sharded group's
checkpoints are written and read by every rank at once (reinforge.distributed.sharded_checkpoint):
rank 0 sends SAVE_SHARDS / LOAD_SHARDS and takes part itself.

A user's policy loss named by import path (`algo.policy_loss`) is imported again in each follower,
from the trainer's import roots (current directory, the recipe's directory): a follower first
builds the objective and reports back, so one that cannot (the user's module does not import
there) stops the run at its start with the import error, before the process group forms.

Nothing hangs: a follower's start (a fresh interpreter importing torch and transformers, then
building its objective and its model) has a deadline of its own (`FollowerSpec.startup_timeout_s`,
by default the step deadline), since on a loaded machine the imports alone can take longer than a
step may; every collective runs under the process group's timeout (`workers.timeout_s`). A
follower that dies leaves rank 0 waiting at most that long, then the run stops with an error that
names the dead rank (`LearnerGroup.follower_failure`); a training process that dies leaves the followers waiting that long, then they exit. A clean end
(or an exception on rank 0) sends the followers a stop message and joins them.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import signal
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM, PretrainedConfig

from reinforge.config import AlgoConfig, ConfigError, LoraConfig
from reinforge.distributed.ddp import DataParallelPolicyLearner, free_port, init_distributed, rank_device, shard_rows
from reinforge.distributed.fsdp import ShardedDriverSync, ShardedPolicyLearner
from reinforge.distributed.sharded_checkpoint import SHARDED_DIR, load_shards, save_shards
from reinforge.distributed.fsdp_policies import process_group_backend
from reinforge.distributed.teardown import leave_process_group
from reinforge.import_paths import import_roots, use_import_roots
from reinforge.learner.batch import TrainingBatch
from reinforge.learner.policy_learner import LossFn
from reinforge.models.lora import apply_lora
from reinforge.runtime.process_settings import configure_process
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.distributed.driver_optimizer import DriverOptimizer
from reinforge.distributed.group_messages import LOAD_SHARDS, SAVE_SHARDS, STEP, STOP

# After a collective failed on rank 0: how long a follower whose death broke it may take to be seen dead.
DEATH_GRACE_S = 10.0


@dataclasses.dataclass
class FollowerSpec:
    """What a follower needs to build the same learner as rank 0 (pickled to a spawned process)."""

    # One policy's model config, or each policy's by name (several policies: one learner each per rank).
    model_config: PretrainedConfig | dict[str, PretrainedConfig]
    learner_kwargs: dict[str, Any]
    algo: AlgoConfig
    threads: int
    timeout_s: float  # every collective (the step deadline)
    device: str = "cpu"  # model.device: on a GPU, rank r trains on cuda:r
    retain_freed_memory: bool = True  # trainer.retain_freed_memory, as rank 0's process has it
    roots: list[str] = dataclasses.field(default_factory=import_roots)  # where the trainer imports user code from
    # A follower's start, up to its report: imports, the objective, the model. None: timeout_s.
    startup_timeout_s: float | None = None
    # model.lora: rank 0 trains adapters on a frozen base, so every follower wraps its model in the
    # same adapters (same config, same seed); the weights, base included, then come from rank 0 and
    # only the adapters, the trainable parameters, have gradients to all-reduce.
    lora: LoraConfig | None = None
    lora_seed: int = 0
    # workers.sharding: none (every rank a full replica) or fsdp (reinforge.distributed.fsdp)
    sharding: str = "none"
    # workers.fsdp_precision (resolved: fp32 / bf16) and workers.fsdp_offload (reinforge.distributed.fsdp_policies)
    fsdp_precision: str = "fp32"
    fsdp_offload: bool = False
    # The policies' critics (critic.enabled), by critic_key: reinforge.distributed.critic_group
    critics: dict = dataclasses.field(default_factory=dict)

    @property
    def learner_options(self) -> dict:
        """What a rank's learner takes besides `learner_kwargs`: a sharded one, how it shards."""
        return dict(precision=self.fsdp_precision, offload=self.fsdp_offload) if self.sharding == "fsdp" else {}

    @property
    def backend(self) -> str | None:
        return process_group_backend(self.device, self.fsdp_offload)

    @property
    def start_deadline_s(self) -> float:
        return self.timeout_s if self.startup_timeout_s is None else self.startup_timeout_s

    @property
    def model_configs(self) -> dict[str, PretrainedConfig]:
        return by_name(self.model_config)


ONE = "policy"  # the name a lone model (not a mapping) goes by inside the group


def by_name(part: Any) -> dict[str, Any]:
    """A mapping name -> part as given, or a lone part as the one-entry mapping."""
    return dict(part) if isinstance(part, dict) else {ONE: part}


class DriverLearner(DataParallelPolicyLearner):
    """Rank 0's learner: `train_step` takes the whole mini-batch, as `PolicyLearner` does."""

    def __init__(self, model, *args, name: str = ONE, **kwargs):
        super().__init__(model, *args, **kwargs)
        self.name = name  # which of the followers' learners takes the mini-batches this one sends
        self._followers_synced = False

    def train_step(self, batch: TrainingBatch, loss_fn: LossFn) -> dict[str, float]:
        if len(batch) < self.world_size:
            # preflight refuses the sizes a config fixes; this is a mini-batch that lost rows on the way
            # (dropped samples, a policy's share of a game's seats)
            raise ConfigError(  # one line at the command line, not a traceback
                f"a mini-batch of {len(batch)} sequences cannot be split over workers.learners={self.world_size} (one sequence "
                "each at least): lower workers.learners or algo.mini_batches, or raise rollout.prompts_per_step"
            )
        try:
            return self._send_and_train(batch, loss_fn)
        except RuntimeError as err:  # a collective failed (gloo / NCCL): because a follower died?
            failure = self.follower_failure(err)
            if failure is None:
                raise
            raise failure from err

    def follower_failure(self, err: BaseException) -> RuntimeError | None:
        """Set by the group: the error naming a follower that died, if one did (LearnerGroup.follower_failure)."""
        return None

    def _send_and_train(self, batch: TrainingBatch, loss_fn: LossFn) -> dict[str, float]:
        state = None
        if not self._followers_synced:
            state = self.synced_state()
            self._followers_synced = True
        dist.broadcast_object_list([(STEP, self.name, batch, state)], src=0, group=self.group)
        if state is not None:
            self.state_sent(state)
        return super().train_step(batch.select(shard_rows(len(batch), self.rank, self.world_size)), loss_fn)

    def synced_state(self) -> dict:
        """What the followers load before their first update (`load_synced_state`): rank 0's state."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "version": self.version}

    def state_sent(self, state: dict) -> None:
        """After the followers were sent `state`: nothing here (this rank's model is the state)."""

    def stop_followers(self) -> None:
        dist.broadcast_object_list([(STOP, None, None, None)], src=0, group=self.group)

    def release(self) -> None:
        """Once the group is gone: drop what holds it (a replica holds nothing of it)."""


class ShardedDriverLearner(ShardedDriverSync, DriverLearner, ShardedPolicyLearner):
    """Rank 0 of a sharded group (workers.sharding=fsdp). `model` stays the loop's full model, rank
    0's only full copy of the policy (its in-process engine samples it without a copy of its own:
    reinforge.engines.borrowed_decoder; the reference, checkpoints and log-probs outside the update
    read it: none of them may run a collective); the update trains a sharded copy of it
    (`trained_model`) and gathers the new weights back into `model` after every step, before the
    loop syncs its engine. `optimizer` is rank 0's view of the sharded AdamW (`DriverOptimizer`):
    in a checkpoint it is the shards every rank writes (reinforge.distributed.sharded_checkpoint)."""

    copy_before_sharding = True  # the sharded copy is made layer by layer (fsdp.copied_layer_by_layer)

    def __init__(self, model, *args, **kwargs):
        super().__init__(model, *args, **kwargs)
        self.sharded, self.model = self.model, model
        self.optimizer = DriverOptimizer(self.optimizer, self)
        self.gather_into = model

    @property
    def trained_model(self):
        return self.sharded

    @property
    def sharded_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizer.inner

    def load_shards(self, entry: dict) -> None:
        """Every rank loads its shards of a sharded checkpoint (the followers on a LOAD_SHARDS message)."""
        dist.broadcast_object_list([(LOAD_SHARDS, self.name, None, entry)], src=0, group=self.group)
        load_shards(self.sharded, self.sharded_optimizer, entry)

    def release(self) -> None:
        """Drop the sharded copy and its optimizer: their device mesh holds the process group, whose
        store and gloo device keep listening while it lives (reinforge.distributed.teardown). The
        full `model` stays."""
        self.sharded, self.trainable, self.optimizer.inner = None, [], None



def sharded_parts(learners: dict[str, ShardedPolicyLearner]) -> dict[str, tuple[torch.nn.Module, torch.optim.Optimizer]]:
    """Each policy's sharded model and optimizer on this rank (rank 0's: the sharded copy, not the loop's model)."""
    return {name: (learner.trained_model, learner.sharded_optimizer) for name, learner in learners.items()}


def serve_follower(learners: dict[str, DataParallelPolicyLearner], loss_fns: dict[str, LossFn]) -> int:
    """A follower's loop: train the named policy's learner on this rank's shard of every batch
    rank 0 sends; returns the steps taken."""
    steps = 0
    while True:
        message = [None]
        dist.broadcast_object_list(message, src=0)
        kind, name, batch, state = message[0]
        if kind == STOP:
            return steps
        if kind in (SAVE_SHARDS, LOAD_SHARDS):  # a sharded group's checkpoint: every rank its own shards
            try:
                if kind == SAVE_SHARDS:
                    save_shards(sharded_parts(learners), state)
                else:
                    load_shards(*sharded_parts(learners)[name], state)
            except Exception:  # noqa: BLE001 - DCP raises it on every rank: rank 0 reports it and stops the group
                pass
            continue
        learner, loss_fn = learners[name], loss_fns[name]
        if state is not None:
            learner.load_synced_state(state)
        learner.train_step(batch.select(shard_rows(len(batch), learner.rank, learner.world_size)), loss_fn)
        steps += 1


def prepare_follower(spec: FollowerSpec, device: str) -> tuple[dict, dict] | str:
    """A follower's slow start-up work, before any collective: its process settings, its import
    roots, one objective and one model per policy. (models, objectives), or why it cannot (a
    message for rank 0 to report: the user's loss does not import here)."""
    configure_process(spec.threads, retain_memory=spec.retain_freed_memory)
    use_import_roots(spec.roots)
    try:  # one per policy: an objective may carry state of its own policy
        loss_fns = {name: make_policy_objective(spec.algo) for name in spec.model_configs}
    except Exception as err:  # noqa: BLE001 - any error building the user's loss: rank 0 reports it
        return str(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {err}"
    models = {}
    for name, config in spec.model_configs.items():
        models[name] = AutoModelForCausalLM.from_config(config).to(device)  # weights come from rank 0
        if spec.lora is not None:
            models[name] = apply_lora(models[name], spec.lora, seed=spec.lora_seed)
    for key, critic in spec.critics.items():  # after the policies, as rank 0 builds them (LearnerGroup.add_critics)
        models[key], loss_fns[key] = critic.build_model(device), None
    return models, loss_fns


def run_follower(
    rank: int, world_size: int, host: str, port: int, spec: FollowerSpec, models: dict, loss_fns: dict, device: str,
) -> int:
    """Join rank 0's process group (rendezvous at host:port) and serve its batches until it stops
    the group; returns the steps taken."""
    init_distributed(rank, world_size, port, host=host, backend=spec.backend, timeout_s=spec.timeout_s, device=device)
    learners = {}
    try:
        # In the driver's order: each learner's construction broadcasts rank 0's weights of that policy.
        kind = ShardedPolicyLearner if spec.sharding == "fsdp" else DataParallelPolicyLearner
        for name, model in models.items():
            if name in spec.critics:  # reinforge.distributed.critic_group
                from reinforge.distributed.critic_group import follower_critic

                learners[name] = follower_critic(model, spec.critics[name], spec.sharding, spec.learner_options)
            else:
                learners[name] = kind(model, **spec.learner_kwargs, **spec.learner_options)
        return serve_follower(learners, loss_fns)
    finally:
        learners.clear()  # their device meshes hold the group (reinforge.distributed.teardown)
        leave_process_group()  # a Ray actor lives on after its group: its sockets too must close


def follower_main(rank: int, world_size: int, port: int, spec: FollowerSpec, report: Connection, host: str = "127.0.0.1") -> None:
    """Entry point of a follower process (spawned: it imports reinforge afresh, inherits nothing).
    It builds the objective and the model first and sends None, or why it cannot, on `report`: all
    the slow start-up work falls under the start-up deadline, none under the first collective's."""
    # Ctrl-C (and a SIGTERM sent to the whole process group) reach the followers too; rank 0 then
    # stops after its step with a checkpoint and stops the followers itself, so a follower must
    # not die of them mid-update. If rank 0 dies instead, the broken connection ends the follower.
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.SIG_IGN)
    device = rank_device(spec.device, rank)
    prepared = prepare_follower(spec, device)
    report.send(prepared if isinstance(prepared, str) else None)
    report.close()
    if isinstance(prepared, str):
        return
    run_follower(rank, world_size, host, port, spec, *prepared, device)


class LearnerGroup:
    """Starts N-1 followers and makes this process rank 0, with a `DriverLearner` on `model`, or on
    each model of a mapping name -> model (several policies; `learners`, in the mapping's order).
    `spec.model_config` is the model's config, or the same mapping of configs."""

    def __init__(self, world_size: int, spec: FollowerSpec, model):
        if world_size < 2:
            raise ValueError(f"a learner group needs at least 2 learners, got {world_size}")
        models = by_name(model)
        if list(models) != list(spec.model_configs):
            raise ValueError(f"the models {list(models)} and the followers' model configs {list(spec.model_configs)} name different policies")
        self.spec = spec
        self.closed = False
        self.followers: list = []
        self.critics: dict = {}  # rank 0's critic learners by policy name (`add_critics`)
        try:
            host, port = self._start_followers(world_size)
            self._await_followers()
            init_distributed(0, world_size, port, host=host, backend=spec.backend, timeout_s=spec.timeout_s, device=rank_device(spec.device, 0))
            driver = ShardedDriverLearner if spec.sharding == "fsdp" else DriverLearner
            self.learners = {name: driver(m, **spec.learner_kwargs, **spec.learner_options, name=name) for name, m in models.items()}
        except BaseException:
            self._kill()
            raise
        for learner in self.learners.values():
            learner.follower_failure = self.follower_failure

    def _start_followers(self, world_size: int) -> tuple[str, int]:
        """Start ranks 1..world_size-1 (here: spawned processes on this machine); the rendezvous
        address (host, port) they were given. reinforge.distributed.ray_learners places them on Ray."""
        port = free_port()
        context = mp.get_context("spawn")  # fork would copy this process's threads (and Ray's)
        self.followers, self._reports = [], []
        for rank in range(1, world_size):
            reader, writer = context.Pipe(duplex=False)
            self.followers.append(context.Process(
                target=follower_main, args=(rank, world_size, port, self.spec, writer), daemon=True, name=f"learner-rank-{rank}",
            ))
            self._reports.append((reader, writer))
        for process in self.followers:
            process.start()
        for _, writer in self._reports:
            writer.close()  # each follower holds its own end: its exit reads as EOF here
        return "127.0.0.1", port

    def _await_followers(self) -> None:
        for rank, (reader, _) in enumerate(self._reports, start=1):
            self._wait_started(rank, reader)

    def _wait_started(self, rank: int, reader: Connection) -> None:
        """Until follower `rank` has built its objective and model; a ConfigError saying why it cannot."""
        process = self.followers[rank - 1]
        deadline = self.spec.start_deadline_s
        if not reader.poll(deadline):
            named = "workers.timeout_s=" if self.spec.startup_timeout_s is None else "a start-up deadline of "
            raise RuntimeError(
                f"data-parallel learner rank {rank} did not start within {named}{deadline:g} s (a fresh process imports "
                "torch and transformers and builds the model first: on a busy machine, raise workers.timeout_s)"
            )
        try:
            error = reader.recv()
        except EOFError:
            process.join(timeout=10)
            raise RuntimeError(f"data-parallel learner rank {rank} exited during start-up (exit code {process.exitcode})") from None
        finally:
            reader.close()
        if error is not None:
            raise ConfigError(
                f"algo.policy_loss: data-parallel learner rank {rank} (a process of its own, importing from "
                f"{', '.join(self.spec.roots)}) cannot build the policy objective: {error}"
            )

    def _kill(self) -> None:
        for process in self.followers:
            if process.is_alive():
                process.kill()
            process.join()

    def _join_followers(self, timeout_s: float) -> None:
        for process in self.followers:
            process.join(timeout=timeout_s)

    def follower_failure(self, err: BaseException) -> RuntimeError | None:
        """After a collective failed on rank 0 with `err`: an error naming the follower that died
        (its death is what broke the collective), or None when every follower is still alive."""
        wait([p.sentinel for p in self.followers], timeout=DEATH_GRACE_S)  # the dead one's exit lands
        dead = [(rank, p.exitcode) for rank, p in enumerate(self.followers, start=1) if p.exitcode is not None]
        if not dead:
            return None
        ranks = ", ".join(f"rank {rank} (exit code {code})" for rank, code in dead)
        return RuntimeError(f"data-parallel learner {ranks} died; the learner group stopped: {err}")

    def add_critics(self, critics: dict) -> dict:
        """Rank 0's side of the followers' critics (FollowerSpec.critics): each policy's critic
        (name -> CriticLearner or None) trained by the group, sharded or replicated as the policy;
        the group's critic learners by policy name (reinforge.distributed.critic_group)."""
        from reinforge.distributed.critic_group import driver_critics

        self.critics = driver_critics(critics, self.spec.sharding, self.spec.learner_options)
        for critic in self.critics.values():
            critic.follower_failure = self.follower_failure
        return self.critics

    def write_shards(self, checkpoint: Path) -> None:
        """A sharded group's part of a checkpoint being written in `checkpoint`: every rank's shards of
        every policy, in its `sharded/` (nothing for full replicas: rank 0's state is the whole)."""
        if self.spec.sharding != "fsdp":
            return
        directory = checkpoint / SHARDED_DIR
        dist.broadcast_object_list([(SAVE_SHARDS, None, None, directory)], src=0)
        save_shards({**sharded_parts(self.learners), **sharded_parts({c.name: c for c in self.critics.values()})}, directory)

    @property
    def learner(self) -> DriverLearner:
        """The driver's learner of a group built on one model."""
        (learner,) = self.learners.values()
        return learner

    def close(self) -> None:
        """Stop the followers, join them, leave the process group; followers that do not stop are
        killed. Again (each policy of a shared group closes it): nothing."""
        if self.closed:
            return
        self.closed = True
        try:
            next(iter(self.learners.values())).stop_followers()
            self._join_followers(30)
        finally:
            self._kill()
            for learner in [*self.learners.values(), *self.critics.values()]:
                learner.release()
            leave_process_group()  # and its sockets: this process lives on after the group
