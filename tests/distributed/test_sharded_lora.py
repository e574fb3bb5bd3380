"""LoRA on a sharded learner (model.lora with workers.learners=2 workers.sharding=fsdp): the frozen
base and the adapters are sharded with FSDP2, only the adapters have gradients and AdamW moments,
every step is the one a single LoRA process takes, and rank 0's full LoRA model gets the new
adapters after it. (The follower building the same adapters, FollowerSpec.lora, and checkpoints:
tests/distributed/test_sharded_parts_run.py.)"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.tensor import DTensor

from reinforge.config import AlgoConfig, LoraConfig
from reinforge.distributed.ddp import free_port, init_distributed, shard_rows
from reinforge.distributed.fsdp import ShardedPolicyLearner
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.models.tiny_llama import build_tiny_llama
from gathered_state import full_optimizer_state
from deadlines import PROCESS_START_S
from teacher_forcing import LearnerState, RecordedStep, StepOutcome, assert_replays
from test_ddp import MAX_RESPONSE, make_batch, make_tokenizer

pytest.importorskip("peft")

from reinforge.models.lora import apply_lora  # noqa: E402

LORA = LoraConfig(r=4, alpha=8.0, target_modules=["q_proj", "v_proj", "down_proj"])
ALGO = AlgoConfig(entropy_coef=0.01)
KWARGS = dict(lr=1e-2, micro_batch_size=2, max_response_tokens=MAX_RESPONSE)
STEPS = 3


def lora_model(tokenizer):
    return apply_lora(build_tiny_llama(tokenizer, "nano", seed=0), LORA, seed=0)


def full(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().clone()


def sharded_state(learner: ShardedPolicyLearner) -> LearnerState:
    """The whole model and AdamW state, gathered from the shards (a collective: every rank calls it)."""
    weights = {k: full(v) for k, v in learner.model.state_dict().items()}
    return LearnerState(weights, full_optimizer_state(learner.optimizer), learner.version)


def train_sharded(rank: int, world_size: int, port: int) -> dict | None:
    """One rank of a 2-rank sharded LoRA learner; rank 0 also keeps a full LoRA model that the
    learner gathers the new adapters into after each step (as a learner group's rank 0 does).
    Returns (on rank 0) the recorded steps, as teacher_forcing records them."""
    torch.set_num_threads(1)
    init_distributed(rank, world_size, port, backend="gloo", timeout_s=PROCESS_START_S)
    try:
        tokenizer = make_tokenizer()
        batch = make_batch(len(tokenizer), tokenizer.pad_token_id)
        loss_fn = make_policy_objective(ALGO)
        learner = ShardedPolicyLearner(lora_model(tokenizer), **KWARGS)
        learner.gather_into = lora_model(tokenizer) if rank == 0 else None
        shard = batch.select(shard_rows(len(batch), rank, world_size))
        steps, gathered = [], []
        for _ in range(STEPS):
            before = sharded_state(learner)
            metrics = learner.train_step(shard, loss_fn)
            params = dict(learner.model.named_parameters())
            grads = {k: full(p.grad) for k, p in params.items() if p.requires_grad}
            after = {k: full(p) for k, p in params.items()}
            steps.append(RecordedStep(before, batch, None, StepOutcome(grads, after, dict(metrics))))
            if rank == 0:
                gathered.append({k: v.detach().clone() for k, v in learner.gather_into.state_dict().items()})
        shares = {}
        for p in learner.model.parameters():
            kind = "adapters" if p.requires_grad else "base"
            local, whole = shares.get(kind, (0, 0))
            shares[kind] = (local + p.to_local().numel(), whole + p.numel())
        return {
            "steps": steps, "gathered": gathered, "shares": {k: local / whole for k, (local, whole) in shares.items()},
            "sharded": all(isinstance(p, DTensor) for p in learner.model.parameters()),
            "trainable": [n for n, p in learner.model.named_parameters() if p.requires_grad],
            "frozen_grads": sum(p.grad is not None for p in learner.model.parameters() if not p.requires_grad),
            "optimized": [tuple(p.shape) for group in learner.optimizer.param_groups for p in group["params"]],
        }
    finally:
        dist.destroy_process_group()


def spawned_main(index: int, rank: int, world_size: int, port: int, path: str) -> None:
    """`rank` in a process of its own (rank 0 too: a process that ran FSDP2 as rank 0 keeps a
    gloo socket listening on every interface, which the Ray loopback test would see in pytest's)."""
    out = train_sharded(rank, world_size, port)
    if rank == 0:
        torch.save(out, path)


def test_two_sharded_lora_ranks_train_the_adapters_one_process_trains(tmp_path) -> None:
    """Each step of the 2 ranks is the single LoRA learner's step from the same state on the whole
    batch (teacher-forcing bounds); the base is sharded too and never moves; the optimizer holds
    the adapters only; rank 0's full model has the new adapters after every step."""
    path = str(tmp_path / "rank0.pt")
    port = free_port()
    ranks = [mp.spawn(spawned_main, args=(rank, 2, port, path), nprocs=1, join=False) for rank in (1, 0)]
    try:
        for rank, context in zip((1, 0), ranks):
            assert context.join(timeout=3 * PROCESS_START_S), f"rank {rank} did not finish"
    finally:
        for process in [p for context in ranks for p in context.processes]:
            if process.is_alive():
                process.kill()
    out = torch.load(path, weights_only=False)
    assert out["sharded"], "the base and the adapters are all DTensor shards"
    assert 0.4 < out["shares"]["base"] <= 0.6 and 0.4 < out["shares"]["adapters"] <= 0.6  # rank 0 holds about half of each

    tokenizer = make_tokenizer()
    reference = lora_model(tokenizer)
    start = reference.state_dict()
    adapters = [name for name, p in reference.named_parameters() if p.requires_grad]
    assert adapters and all(".lora_" in name for name in adapters)
    assert out["trainable"] == adapters
    assert out["optimized"] == [tuple(dict(reference.named_parameters())[name].shape) for name in adapters], "AdamW: the adapters only"
    steps = out["steps"]
    assert sorted(steps[-1].before.optimizer["state"]) == list(range(len(adapters))), "moments of the adapters only"
    assert set(steps[0].outcome.grads) == set(adapters) and out["frozen_grads"] == 0, "gradients for the adapters only"
    end = steps[-1].outcome.weights
    assert all(torch.equal(end[k], start[k]) for k in end if ".lora_" not in k), "the frozen base changed"
    moved = max((end[k] - start[k]).abs().max().item() for k in adapters)
    assert moved > KWARGS["lr"] / 2, "the adapters did not train"
    # Rank 0's full model holds, after every step, the weights the shards hold (the adapters gathered).
    for step, gathered in zip(steps, out["gathered"]):
        assert all(torch.equal(gathered[k], w) for k, w in step.outcome.weights.items())
    loss_fn = make_policy_objective(ALGO)
    for step in steps:
        step.loss_fn = loss_fn
    assert_replays(PolicyLearner(lora_model(tokenizer), **KWARGS), steps, ALGO)
