"""A learner group whose followers are Ray actors placed on the cluster (workers.learner_placement=ray).

`LearnerGroup` (reinforge.distributed.learner_group) spawns ranks 1..N-1 as processes of the
training machine. `RayLearnerGroup` starts them as Ray actors instead, one per bundle of a
placement group (bundle r-1 holds rank r: `cpus_per_rank` CPUs, and one GPU when the policy is on a
GPU), so a run that joins a cluster (`workers.address`) trains on that cluster's nodes. Everything
else is the same code: each actor runs the follower's start-up (`prepare_follower`, under the
start-up deadline) and then its loop (`run_follower`); rank 0 stays the training process.

Placement: PACK, Ray's default, puts the ranks on as few nodes as hold them (NCCL within a node is
faster than across nodes) and spreads them only when one node cannot hold them. Rank 0, the
training process, is not in the group (its resources are the driver's): on a GPU node, start that
node's Ray with one GPU fewer than it has (`ray start --num-gpus`) so no follower is given rank 0's
GPU. A placement group the cluster cannot hold never becomes ready: it is refused after the
start-up deadline with what the group asked for and what the cluster has.

The rendezvous (torch.distributed's TCP store) is on rank 0: the training process's node IP as Ray
sees it (a local loopback cluster: 127.0.0.1; a real cluster: the address the other nodes reach).

A follower that dies (actor killed, node lost) breaks rank 0's next collective, or times it out
after workers.timeout_s; the error then names the rank and what Ray says of its death.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

from reinforge.config import ConfigError
from reinforge.distributed.ddp import free_port
from reinforge.distributed.learner_group import DEATH_GRACE_S, FollowerSpec, LearnerGroup, prepare_follower, run_follower
from reinforge.distributed.ray_cluster import import_ray, start_ray

LOGS_HINT = "its log is under /tmp/ray/session_latest/logs (worker-*.err) on its node; `ray status` shows the cluster"


class LearnerRank:
    """The actor body of follower `rank`: `prepare` (the start-up work), then `serve` (joins the
    group and trains until rank 0 stops it)."""

    def __init__(self, rank: int, spec: FollowerSpec):
        self.rank, self.spec = rank, spec
        # Ray makes the bundle's GPU the actor's only visible one.
        self.device = "cuda:0" if torch.device(spec.device).type == "cuda" else "cpu"
        self.prepared: tuple[dict, dict] | None = None

    def prepare(self) -> str | None:
        """None once the objective and the model are built, else why they cannot be."""
        prepared = prepare_follower(self.spec, self.device)
        if isinstance(prepared, str):
            return prepared
        self.prepared = prepared
        return None

    def where(self) -> tuple[str, int]:
        """(Ray node id, pid) of this rank."""
        ray = import_ray()
        return ray.get_runtime_context().get_node_id(), os.getpid()

    def serve(self, world_size: int, host: str, port: int) -> int:
        assert self.prepared is not None, "prepare() first"
        return run_follower(self.rank, world_size, host, port, self.spec, *self.prepared, self.device)


def rank_bundle(spec: FollowerSpec, cpus_per_rank: float) -> dict[str, float]:
    """What one follower rank reserves on its node."""
    bundle = {"CPU": float(cpus_per_rank)}
    if torch.device(spec.device).type == "cuda":
        bundle["GPU"] = 1.0
    return bundle


class RayLearnerGroup(LearnerGroup):
    """`LearnerGroup` with ranks 1..N-1 as Ray actors in a placement group (see the module docstring).
    `address`: the Ray cluster to join (None: the one this process is connected to, or a local one)."""

    def __init__(self, world_size: int, spec: FollowerSpec, model, address: str | None = None, cpus_per_rank: float = 1.0):
        start_ray(address)
        self.ray = import_ray()
        self.cpus_per_rank = cpus_per_rank
        self.actors: list[Any] = []
        self.placement = None
        self._serving: list[Any] = []
        self.placed: list[tuple[str, int]] = []
        # A rank runs as many torch threads as CPUs it reserved (at least one), not the trainer's count.
        spec = dataclasses.replace(spec, threads=max(1, int(cpus_per_rank)))
        super().__init__(world_size, spec, model)

    def _start_followers(self, world_size: int) -> tuple[str, int]:
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = rank_bundle(self.spec, self.cpus_per_rank)
        self.placement = placement_group([dict(bundle) for _ in range(1, world_size)], strategy="PACK")
        self._wait_placed(world_size, bundle)
        actor_class = self.ray.remote(max_restarts=0)(LearnerRank)
        for rank in range(1, world_size):
            strategy = PlacementGroupSchedulingStrategy(self.placement, placement_group_bundle_index=rank - 1)
            self.actors.append(actor_class.options(
                num_cpus=bundle["CPU"], num_gpus=bundle.get("GPU", 0.0), scheduling_strategy=strategy,
            ).remote(rank, self.spec))
        host = self.ray.util.get_node_ip_address()  # rank 0's node, as the other nodes reach it
        self._address = (world_size, host, free_port(host))
        return self._address[1:]

    def _wait_placed(self, world_size: int, bundle: dict[str, float]) -> None:
        deadline = self.spec.start_deadline_s
        ready, _ = self.ray.wait([self.placement.ready()], timeout=deadline)
        if ready:
            return
        asked = ", ".join(f"{key}: {value:g}" for key, value in bundle.items())
        have = {key: self.ray.cluster_resources().get(key, 0.0) for key in bundle}
        free = {key: self.ray.available_resources().get(key, 0.0) for key in bundle}
        raise RuntimeError(
            f"workers.learners={world_size}: the Ray cluster could not place learner ranks 1..{world_size - 1} within "
            f"{deadline:g} s: they need {world_size - 1} x {{{asked}}} (workers.cpus_per_worker CPUs each"
            f"{', one GPU each' if 'GPU' in bundle else ''}), the cluster has "
            + ", ".join(f"{key}: {have[key]:g} in all, {free[key]:g} free" for key in bundle)
            + "; add nodes, lower workers.learners or workers.cpus_per_worker"
        )

    def _await_followers(self) -> None:
        deadline = self.spec.start_deadline_s
        calls = {actor.prepare.remote(): rank for rank, actor in enumerate(self.actors, start=1)}
        ready, pending = self.ray.wait(list(calls), num_returns=len(calls), timeout=deadline)
        if pending:
            rank = calls[pending[0]]
            named = "workers.timeout_s=" if self.spec.startup_timeout_s is None else "a start-up deadline of "
            raise RuntimeError(
                f"data-parallel learner rank {rank} (a Ray actor) did not start within {named}{deadline:g} s (it imports torch and "
                "transformers and builds the model first: on a busy cluster, raise workers.startup_timeout_s)"
            )
        for ref in ready:
            rank = calls[ref]
            try:
                error = self.ray.get(ref)
            except self.ray.exceptions.RayError as err:
                raise RuntimeError(f"data-parallel learner rank {rank} (a Ray actor) died during start-up: {first_line(err)}; {LOGS_HINT}") from None
            if error is not None:
                raise ConfigError(
                    f"algo.policy_loss: data-parallel learner rank {rank} (a Ray actor, importing from "
                    f"{', '.join(self.spec.roots)}) cannot build the policy objective: {error}"
                )
        # Where each rank runs, (Ray node id, pid) of ranks 1..N-1: asked now, as `serve` holds the actor from here on.
        self.placed = self.ray.get([actor.where.remote() for actor in self.actors], timeout=deadline)
        # Every rank is ready: they join the process group that rank 0 opens next.
        self._serving = [actor.serve.remote(*self._address) for actor in self.actors]

    def _kill(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        if self.placement is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement)
            self.placement = None

    def _join_followers(self, timeout_s: float) -> None:
        if self._serving:
            self.ray.wait(self._serving, num_returns=len(self._serving), timeout=timeout_s)

    def follower_failure(self, err: BaseException) -> RuntimeError | None:
        """The rank whose actor ended (died, or left the loop) while rank 0 was in a collective."""
        if not self._serving:
            return None
        ended, _ = self.ray.wait(self._serving, num_returns=1, timeout=DEATH_GRACE_S)
        if not ended:
            return None
        rank = self._serving.index(ended[0]) + 1
        try:
            self.ray.get(ended[0])
            why = "left the group's loop"
        except self.ray.exceptions.RayError as death:
            why = f"died ({first_line(death)})"
        return RuntimeError(f"data-parallel learner rank {rank} (a Ray actor) {why}; the learner group stopped: {first_line(err)}; {LOGS_HINT}")


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
