"""Learner ranks placed on a Ray cluster (workers.learner_placement=ray, reinforge.distributed.ray_learners),
on Ray's local multi-node test cluster: a head node without CPUs (where this process, rank 0, runs)
and worker nodes of one CPU each, so every follower rank lands on a node of its own.

The file sorts after test_ray_workers.py: rank 0 runs in this process, and a process that ran
FSDP2 as rank 0 keeps a socket listening on every interface, which the Ray loopback test would see."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from reinforge.distributed.learner_group import FollowerSpec, LearnerGroup
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.models.tiny_llama import build_tiny_llama
from deadlines import PROCESS_START_S
from test_ddp import LR, MAX_RESPONSE, algo_for, make_batch, make_tokenizer

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from reinforge.distributed.ray_cluster import stop_ray  # noqa: E402
from reinforge.distributed.ray_learners import RayLearnerGroup  # noqa: E402

KWARGS = dict(lr=LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE)
ALGO = algo_for("token_mean")


@pytest.fixture(scope="module")
def cluster():
    stop_ray()  # a session another module left: this module's driver joins the test cluster
    nodes = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0))
    nodes.add_node(num_cpus=1)
    ray.init(address=nodes.address, log_to_driver=False)
    nodes.wait_for_nodes()
    yield nodes
    stop_ray()
    nodes.shutdown()


def spec_for(model, sharding: str = "none", **overrides) -> FollowerSpec:
    return FollowerSpec(model.config, KWARGS, ALGO, threads=1, sharding=sharding, **{"timeout_s": PROCESS_START_S, **overrides})


def two_steps(make_group, sharding: str) -> list[dict[str, torch.Tensor]]:
    """Weights of rank 0's model after each of two updates on the same batch, from the same start."""
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    group = make_group(model, spec_for(model, sharding))
    try:
        after = []
        for _ in range(2):
            group.learner.train_step(batch, make_policy_objective(ALGO))
            after.append({k: v.clone() for k, v in model.state_dict().items()})
    finally:
        group.close()
    return after


@pytest.mark.parametrize("sharding", ["none", "fsdp"])
def test_ranks_on_ray_nodes_make_the_process_launchers_update(cluster, sharding) -> None:
    """2 ranks, rank 1 a Ray actor on another node than rank 0: the same bits as rank 1 spawned here."""
    placed: list = []

    def on_ray(model, spec):
        group = RayLearnerGroup(2, spec, model)
        placed.extend(group.placed)
        return group

    ray_steps = two_steps(on_ray, sharding)
    process_steps = two_steps(lambda model, spec: LearnerGroup(2, spec, model), sharding)
    (rank_1_node, _), = placed
    assert rank_1_node != ray.get_runtime_context().get_node_id(), "rank 1 runs on a node of its own"
    assert rank_1_node in {node.node_id for node in cluster.worker_nodes}
    start = build_tiny_llama(make_tokenizer(), "nano", seed=0).state_dict()
    assert max((ray_steps[-1][k] - start[k]).abs().max().item() for k in start) > LR / 2  # the update moved the weights
    for on_ray_step, spawned_step in zip(ray_steps, process_steps):
        for k, weights in spawned_step.items():
            assert torch.equal(on_ray_step[k], weights), k


def test_a_rank_killed_mid_run_stops_the_group_naming_it(cluster) -> None:
    """The follower actor is killed between two updates: the next one raises, naming rank 1, within
    the collectives' deadline (workers.timeout_s, 20 s here), and does not hang."""
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    group = RayLearnerGroup(2, spec_for(model, timeout_s=20, startup_timeout_s=PROCESS_START_S), model)
    try:
        group.learner.train_step(batch, make_policy_objective(ALGO))
        ray.kill(group.actors[0], no_restart=True)
        with pytest.raises(RuntimeError, match=r"data-parallel learner rank 1 \(a Ray actor\) died"):
            group.learner.train_step(batch, make_policy_objective(ALGO))
    finally:
        group._kill()
        dist.destroy_process_group()


def test_more_ranks_than_the_cluster_holds_is_refused_at_start(cluster) -> None:
    """3 ranks need 2 one-CPU bundles; the cluster has one CPU: a clear error once the start-up
    deadline (2 s, meant to be hit) has passed, naming what is missing, and nothing is left behind."""
    model = build_tiny_llama(make_tokenizer(), "nano", seed=0)
    with pytest.raises(RuntimeError) as err:
        RayLearnerGroup(3, spec_for(model, startup_timeout_s=2), model)
    message = str(err.value)
    assert "could not place learner ranks 1..2 within 2 s" in message
    assert "need 2 x {CPU: 1}" in message and "CPU: 1 in all" in message
    assert not dist.is_initialized()
    assert ray.util.placement_group_table() and all(
        entry["state"] == "REMOVED" for entry in ray.util.placement_group_table().values()
    )


@pytest.mark.slow  # a whole run on the test cluster; .ci/run runs tests/distributed -m slow
def test_train_with_workers_address_places_rank_1_on_the_cluster(cluster, tmp_path, monkeypatch) -> None:
    """`reinforge train` with workers.learners=2 and workers.address set: rank 1 runs as a Ray actor
    on the cluster's worker node, and the run's updates are the bits of the same run with rank 1
    spawned here (workers.learner_placement=processes)."""
    from reinforge.config import load_config
    from reinforge.distributed.learner_group import DriverLearner
    from reinforge.run.pipeline import run_training

    tiny = [
        "model.preset=nano", "task.train_size=40", "task.eval_size=4", "trainer.steps=2", "rollout.prompts_per_step=2",
        "rollout.group_size=2", "rollout.max_new_tokens=4", "eval.every=100", "eval.samples=1", "trainer.checkpoint_every=0",
        "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'", "sft.steps=0",
        "algo.entropy_coef=0.01",  # a gradient on every step, whatever the rewards of an untrained model
        "workers.learners=2", f"workers.timeout_s={PROCESS_START_S:g}", f"workers.address={cluster.address}",
    ]
    original, groups = DriverLearner.train_step, []

    def recording(self, batch, loss_fn):
        metrics = original(self, batch, loss_fn)
        self.after.append({k: v.clone() for k, v in self.model.state_dict().items()})
        return metrics

    runs = {}
    for placement in ("auto", "processes"):
        after: list = []
        with monkeypatch.context() as patch:
            patch.setattr(DriverLearner, "after", after, raising=False)
            patch.setattr(DriverLearner, "train_step", recording)
            patch.setattr(RayLearnerGroup, "_await_followers", recording_group(RayLearnerGroup._await_followers, groups))
            run_training(load_config("default", [*tiny, f"workers.learner_placement={placement}", f"trainer.output_dir={tmp_path / placement}"]))
        runs[placement] = after
    (group,) = groups  # auto with an address: the Ray launcher, only then
    ((rank_1_node, _),) = group.placed
    assert rank_1_node in {node.node_id for node in cluster.worker_nodes}
    assert len(runs["auto"]) == len(runs["processes"]) == 2
    for on_ray, spawned in zip(runs["auto"], runs["processes"]):
        assert all(torch.equal(on_ray[k], v) for k, v in spawned.items())
    assert any(not torch.equal(runs["auto"][0][k], v) for k, v in runs["auto"][1].items()), "the second update moved the weights"


def recording_group(original, groups: list):
    def await_followers(self):
        groups.append(self)
        return original(self)

    return await_followers
