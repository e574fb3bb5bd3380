"""Learner memory per rank with and without sharding (workers.sharding=fsdp): the bytes of
parameters, gradients and AdamW state one rank holds after an optimizer step, for N = 1 (one
PolicyLearner) and N = 2 (two FSDP2 ranks over gloo, each holding its shards: DTensor.to_local()).
Counted from the tensors themselves, not the process's RSS (which also holds torch, the batch and
activations). Rank 0 of a `reinforge train` learner group also keeps a full copy of the weights
for its engine (not counted here: it is the engine's model).

    python benchmarks/fsdp_memory.py [--preset micro] [--rows 16] [--tokens 16]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp

import torch
from torch.distributed.tensor import DTensor

from learner_scaling import make_batch
from reinforge.config import AlgoConfig
from reinforge.distributed.ddp import free_port, init_distributed, shard_rows
from reinforge.distributed.fsdp import ShardedPolicyLearner
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.tokenizer import train_tokenizer


def local_bytes(tensor: torch.Tensor | None) -> int:
    if tensor is None:
        return 0
    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    return local.numel() * local.element_size()


def held_bytes(learner: PolicyLearner) -> dict[str, int]:
    params = list(learner.model.parameters())
    moments = [value for state in learner.optimizer.state.values() for value in state.values() if isinstance(value, torch.Tensor)]
    return {
        "parameters": sum(local_bytes(p) for p in params),
        "gradients": sum(local_bytes(p.grad) for p in params),
        "optimizer": sum(local_bytes(t) for t in moments),
    }


def one_step(learner_cls, args, rank: int, world_size: int) -> dict[str, int]:
    torch.manual_seed(0)
    tokenizer = train_tokenizer([f"{a}+{b}" for a in range(40) for b in range(10)])
    model = build_tiny_llama(tokenizer, args.preset, seed=0)
    learner = learner_cls(model, 1e-4, micro_batch_size=args.rows, max_response_tokens=args.tokens)
    batch = make_batch(tokenizer, args.rows, args.tokens)
    learner.train_step(batch.select(shard_rows(len(batch), rank, world_size)), make_policy_objective(AlgoConfig()))
    return held_bytes(learner)


def rank_main(rank: int, port: int, args, results) -> None:
    torch.set_num_threads(1)
    init_distributed(rank, 2, port, backend="gloo")
    try:
        results.put((rank, one_step(ShardedPolicyLearner, args, rank, 2)))
    finally:
        torch.distributed.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="micro")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = {"N=1": one_step(PolicyLearner, args, 0, 1)}
    context = mp.get_context("spawn")
    results, port = context.SimpleQueue(), free_port()
    processes = [context.Process(target=rank_main, args=(rank, port, args, results)) for rank in range(2)]
    for process in processes:
        process.start()
    for _ in processes:
        rank, held = results.get()
        rows[f"N=2 rank {rank}"] = held
    for process in processes:
        process.join()
    print(f"{'':12} {'parameters':>12} {'gradients':>12} {'optimizer':>12} {'total':>12}  (MiB, {args.preset} model)")
    for name, held in rows.items():
        mib = [v / 2**20 for v in (*held.values(), sum(held.values()))]
        print(f"{name:12} " + " ".join(f"{v:12.2f}" for v in mib))


if __name__ == "__main__":
    main()
