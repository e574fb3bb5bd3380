"""Sharded learner (workers.sharding=fsdp): 2 FSDP2 gloo ranks on CPU make the step one process
makes on the whole batch, and a learner group built on it keeps the loop's full model in sync."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor

from reinforge.distributed.ddp import free_port, init_distributed, shard_rows
from reinforge.distributed.fsdp import ShardedPolicyLearner
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.models.tiny_llama import build_tiny_llama
from gathered_state import full_optimizer_state
from deadlines import PROCESS_START_S
from two_ranks import run_two_ranks
from teacher_forcing import LearnerState, RecordedStep, StepOutcome, assert_replays
from test_ddp import AGGREGATIONS, LR, MAX_RESPONSE, algo_for, make_batch, make_tokenizer, single_learner


def full(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().clone()


def sharded_snapshot(learner: ShardedPolicyLearner) -> LearnerState:
    """The whole model's state, gathered from the shards (a collective: every rank calls it)."""
    weights = {k: full(v) for k, v in learner.model.state_dict().items()}
    return LearnerState(weights, full_optimizer_state(learner.optimizer), learner.version)


def sharded_step(learner: ShardedPolicyLearner, batch, loss_fn, shard) -> RecordedStep:
    before = sharded_snapshot(learner)
    metrics = learner.train_step(shard, loss_fn)
    params = dict(learner.model.named_parameters())
    grads = {k: full(p.grad) for k, p in params.items()}
    return RecordedStep(before, batch, loss_fn, StepOutcome(grads, {k: full(p) for k, p in params.items()}, dict(metrics)))


def train_sharded(rank: int, world_size: int, steps: int = 2):
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    out = {}
    for agg in AGGREGATIONS:
        learner = ShardedPolicyLearner(build_tiny_llama(tokenizer, "nano", seed=0), LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE)
        assert all(isinstance(p, DTensor) for p in learner.model.parameters())
        loss_fn = make_policy_objective(algo_for(agg))
        shard = batch.select(shard_rows(len(batch), rank, world_size))
        out[agg] = [sharded_step(learner, batch, loss_fn, shard) for _ in range(steps)]
        local = sum(p.to_local().numel() for p in learner.model.parameters())
        out[agg + "/local_share"] = local / learner.trainable_params
    return out


def rank_main(rank: int, world_size: int, port: int):
    init_distributed(rank, world_size, port, backend="gloo", timeout_s=PROCESS_START_S)
    try:
        return train_sharded(rank, world_size)
    finally:
        dist.destroy_process_group()


def child_main(index: int, world_size: int, port: int) -> None:
    rank_main(index + 1, world_size, port)


def rank_0_main(index: int, world_size: int, port: int, path: str) -> None:
    """Rank 0 in a process of its own: a process that ran FSDP2 keeps a gloo socket listening on
    every interface after its group is destroyed, which the Ray loopback test would see in pytest's."""
    out = rank_main(0, world_size, port)
    torch.save({k: [replace(step, loss_fn=None) for step in v] if isinstance(v, list) else v for k, v in out.items()}, path)


def test_two_fsdp_ranks_match_one_process(tmp_path) -> None:
    """Every step of 2 sharded ranks is the step one process takes on the whole batch from the
    same state (tests/teacher_forcing.py bounds, as for the replicated learner), for every loss
    aggregation; each rank holds about half of the weights."""
    port = free_port()
    run_two_ranks(rank_0_main, (2, port, str(tmp_path / "rank0.pt")), child_main, (2, port))
    parallel = torch.load(tmp_path / "rank0.pt", weights_only=False)
    for agg in AGGREGATIONS:
        parallel[agg] = [replace(step, loss_fn=make_policy_objective(algo_for(agg))) for step in parallel[agg]]
    tokenizer = make_tokenizer()
    initial = build_tiny_llama(tokenizer, "nano", seed=0).state_dict()
    for agg in AGGREGATIONS:
        steps = parallel[agg]
        assert all(torch.equal(steps[0].before.model[k], initial[k]) for k in initial)
        assert steps[1].before.optimizer["state"], "the second step starts from AdamW moments"
        assert_replays(single_learner(build_tiny_llama(tokenizer, "nano", seed=0)), steps, algo_for(agg))
        moved = max((steps[-1].outcome.weights[k] - initial[k]).abs().max().item() for k in steps[-1].outcome.weights)
        assert moved > LR / 2
        assert 0.4 < parallel[agg + "/local_share"] <= 0.6  # rank 0's shard: dim-0 halves (odd sizes round up)


@pytest.mark.slow  # a whole run (~20-100 s); .ci/run runs the slow group of this file
def test_learner_group_with_fsdp_keeps_rank_0s_full_model_and_resumes_exactly(tmp_path) -> None:
    """`reinforge train` with workers.learners=2 sharding=fsdp: rank 0 (this process) drives a
    spawned follower. After each step the loop's full model on rank 0 holds exactly the weights
    the two sharded ranks computed (the same bits as the ranks of the test above, which match one
    process); a checkpoint's shards (every rank writes its own: torch.distributed.checkpoint) hold
    the whole model's AdamW state; and a fresh group given step 1's weights and those shards, or
    the same state in the plain layout (an unsharded run's checkpoint), takes exactly the same step 2."""
    from reinforge.distributed.learner_group import FollowerSpec, LearnerGroup
    from reinforge.distributed.sharded_checkpoint import SHARDED_DIR, load_learner_shards, load_shards
    from reinforge.runtime.checkpoint import PART

    port = free_port()
    child = mp.spawn(child_main, args=(2, port), nprocs=1, join=False)
    try:
        direct = rank_main(0, 2, port)["token_mean"]
        assert child.join(timeout=PROCESS_START_S), "rank 1 did not finish"
    finally:
        for process in child.processes:
            if process.is_alive():
                process.kill()
    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    algo = algo_for("token_mean")
    loss_fn = make_policy_objective(algo)
    kwargs = dict(lr=LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE)

    def group_on(model):
        spec = FollowerSpec(model.config, kwargs, algo, threads=1, timeout_s=PROCESS_START_S, sharding="fsdp")
        return LearnerGroup(2, spec, model)

    model = build_tiny_llama(tokenizer, "nano", seed=0)
    group = group_on(model)
    try:
        driver = group.learner
        assert driver.model is model and not isinstance(next(model.parameters()), DTensor)
        driver.train_step(batch, loss_fn)
        after_one = {k: v.clone() for k, v in model.state_dict().items()}
        group.write_shards(tmp_path)
        entry = {**driver.optimizer.state_dict(), PART: tmp_path / SHARDED_DIR}  # as state.pt holds it, loaded
        driver.train_step(batch, loss_fn)
        after_two = {k: v.clone() for k, v in model.state_dict().items()}
    finally:
        group.close()
    assert [p.exitcode for p in group.followers] == [0]
    assert driver.version == 2
    for k, weights in direct[1].before.model.items():  # the ranks above, after their step 1 and 2
        assert torch.equal(after_one[k], weights), k
    for k, weights in direct[1].outcome.weights.items():
        assert torch.equal(after_two[k], weights), k
    assert entry["world_size"] == 2 and sorted(p.name for p in (tmp_path / SHARDED_DIR).glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    # The shards read back whole, by one process (a resume with workers.sharding=none): step 1's
    # weights, and the moments of every parameter the ranks above gathered after their step 1.
    plain = direct[1].before.optimizer
    whole = build_tiny_llama(tokenizer, "nano", seed=1)
    whole_optimizer = torch.optim.AdamW(whole.parameters(), lr=LR)
    load_shards(whole, whole_optimizer, entry, alone=True)
    assert all(torch.equal(whole.state_dict()[k], v) for k, v in after_one.items())
    read = whole_optimizer.state_dict()["state"]
    assert set(read) == set(plain["state"]) and read, "the moments of every parameter, numbered"
    for index, moments in plain["state"].items():
        assert all(torch.equal(read[index][key], value) for key, value in moments.items())

    # Resume: another start (seed 1), given step 1's weights, learner state and version: from the
    # shards, then again from the plain layout.
    other = build_tiny_llama(tokenizer, "nano", seed=1)
    group = group_on(other)
    resumed = []
    try:
        driver = group.learner
        for load in (lambda: load_learner_shards(driver, entry), lambda: driver.optimizer.load_state_dict(plain)):
            other.load_state_dict(after_one)
            load()
            driver.version = 1
            driver.train_step(batch, loss_fn)
            resumed.append({k: v.clone() for k, v in other.state_dict().items()})
    finally:
        group.close()
    assert driver.version == 2
    for weights in resumed:
        assert all(torch.equal(weights[k], v) for k, v in after_two.items()), "the resumed step 2 is the same bits"
