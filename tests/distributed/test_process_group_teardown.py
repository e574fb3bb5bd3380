"""A process that ran FSDP2 as rank 0 closes its sockets when it leaves the process group
(reinforge.distributed.teardown): nothing keeps listening afterwards, on '::' or anywhere."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist

from reinforge.distributed.ddp import init_distributed, shard_rows
from reinforge.distributed.fsdp import ShardedPolicyLearner
from reinforge.distributed.teardown import leave_process_group
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.models.tiny_llama import build_tiny_llama
from deadlines import PROCESS_START_S
from rank_zero_here import rank_zero_here
from test_ddp import LR, MAX_RESPONSE, algo_for, make_batch, make_tokenizer

LISTEN = "0A"  # the TCP state "listening" in /proc/net/tcp{,6}


def own_listening_sockets() -> set[tuple[str, str]]:
    """(table, local address) of every TCP socket this process holds open in the listening state.
    /proc/self/net/tcp* lists the whole network namespace: keep the sockets among our own fds."""
    own = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            own.add(target[len("socket:["):-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/self/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == LISTEN and fields[9] in own:
                found.add((table, fields[1]))
    return found


def one_sharded_step(rank: int, world_size: int) -> None:
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    learner = ShardedPolicyLearner(build_tiny_llama(tokenizer, "nano", seed=0), LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE)
    learner.train_step(batch.select(shard_rows(len(batch), rank, world_size)), make_policy_objective(algo_for("token_mean")))


def follower(index: int, world_size: int, port: int) -> None:
    torch.set_num_threads(1)
    init_distributed(index + 1, world_size, port, backend="gloo", timeout_s=PROCESS_START_S)
    try:
        one_sharded_step(index + 1, world_size)
    finally:
        leave_process_group()


def test_rank_0_of_a_sharded_run_leaves_no_listening_socket() -> None:
    """Rank 0 runs in this process: while its group lives it listens (the TCPStore's server on '::'
    at the rendezvous port, gloo on loopback), so the check sees those sockets; after
    `leave_process_group` none of them is left, though the process lives on."""
    torch.set_num_threads(1)
    before = own_listening_sockets()
    with rank_zero_here(follower) as port:
        one_sharded_step(0, 2)
        during = own_listening_sockets() - before
    store = ("tcp6", f"{0:032X}:{port:04X}")  # '::' at the rendezvous port
    assert store in during, f"the check does not see rank 0's store listening: {during}"
    assert not dist.is_initialized()
    assert own_listening_sockets() - before == set(), "sockets still listening after the group was left"


def test_a_closed_sharded_learner_group_leaves_no_listening_socket() -> None:
    """`reinforge train` with workers.learners=2 sharding=fsdp: after `LearnerGroup.close()` the
    training process (rank 0) listens on nothing the group opened, and the follower exited cleanly."""
    from reinforge.distributed.learner_group import FollowerSpec, LearnerGroup

    torch.set_num_threads(1)
    tokenizer = make_tokenizer()
    batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
    algo = algo_for("token_mean")
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    spec = FollowerSpec(
        model.config, dict(lr=LR, micro_batch_size=2, max_response_tokens=MAX_RESPONSE), algo, threads=1,
        timeout_s=PROCESS_START_S, sharding="fsdp",
    )
    before = own_listening_sockets()
    group = LearnerGroup(2, spec, model)
    try:
        group.learner.train_step(batch, make_policy_objective(algo))
        assert own_listening_sockets() - before, "the check does not see rank 0's sockets while the group lives"
    finally:
        group.close()
    assert [p.exitcode for p in group.followers] == [0]
    assert own_listening_sockets() - before == set(), "sockets still listening after the group was closed"
