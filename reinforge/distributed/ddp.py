"""A data-parallel policy learner over torch.distributed (gloo on CPU, NCCL on GPU).

Every rank holds the same model and optimizer and trains on its own shard of the batch. The loss
of a shard is normalized by the counts of the *whole* batch (tokens and sequences summed over the
ranks, see `LossNormalizer` and reinforge.algos.losses.aggregation), so the shard losses add up
to the loss of the whole batch and so do their gradients: summing the gradients over the ranks
(an all-reduce, before clipping) gives every rank exactly the gradient the single-process learner
computes on the whole batch, and every rank then takes the same clipped AdamW step. Metrics are
shares of the whole-batch metrics too, and are summed the same way (the gradient norm is already
global after the all-reduce).

Why not `torch.nn.parallel.DistributedDataParallel`: it averages gradients (divides by the world
size) and all-reduces after every backward, i.e. every micro-batch; summing once per optimizer
step, with losses normalized by global counts, is both exact for every loss aggregation (token
mean, sequence mean, constant) and cheaper with gradient accumulation.

Ranks must all call `train_step` (collectives block until every rank arrives); a rank that fails
leaves the others waiting until the process group's timeout (`init_distributed(timeout_s=...)`),
which then raises on them: a broken run stops, it does not hang.
"""

from __future__ import annotations

import datetime
import socket

import torch
import torch.distributed as dist

from reinforge.algos.types import LossNormalizer
from reinforge.learner.batch import TrainingBatch
from reinforge.learner.policy_learner import LossFn, PolicyLearner


def default_backend(device: str | torch.device = "cpu") -> str:
    """NCCL for models on GPUs, gloo for models on the CPU (whether or not the machine has a GPU:
    NCCL cannot reduce CPU tensors)."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def rank_device(device: str, rank: int) -> str:
    """Where learner `rank` trains: rank r on cuda:r when the policy is on a GPU, else the CPU."""
    return f"cuda:{rank}" if torch.device(device).type == "cuda" else "cpu"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now on `host` (for the rendezvous of a local process group)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def init_distributed(
    rank: int, world_size: int, port: int, host: str = "127.0.0.1", backend: str | None = None, timeout_s: float = 300.0,
    device: str = "cpu",
) -> None:
    """Join the default process group (TCP rendezvous at host:port; loopback by default); the
    backend follows `device`, the device this rank's model is on (set as the current GPU for NCCL)."""
    backend = backend or default_backend(device)
    if backend == "nccl" and not torch.cuda.is_available():  # else torch's own error, deep in a rank's start
        raise RuntimeError(
            f"learner rank {rank} needs NCCL on {device}, but torch sees no CUDA GPU on this machine "
            f"(torch {torch.__version__}): set model.device=cpu (gloo), or run where torch sees a GPU"
        )
    if torch.device(device).type == "cuda":
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(
        backend,
        init_method=f"tcp://{host}:{port}",
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def shard_rows(num_rows: int, rank: int, world_size: int) -> slice:
    """This rank's contiguous rows of a batch (sizes differ by at most one)."""
    base, extra = divmod(num_rows, world_size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


@torch.no_grad()
def broadcast_module(module: torch.nn.Module, group=None, src: int = 0) -> None:
    """Make every rank's parameters and buffers equal to rank `src`'s."""
    for tensor in [*module.parameters(), *module.buffers()]:
        dist.broadcast(tensor.data, src=src, group=group)


@torch.no_grad()
def all_reduce_gradients(parameters, group=None, bucket_bytes: int = 32 << 20) -> None:
    """Sum every parameter's gradient over the ranks, in flat buckets (a missing gradient is zero)."""
    grads = []
    for p in parameters:
        if not p.requires_grad:
            continue
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        grads.append(p.grad)
    bucket: list[torch.Tensor] = []
    size = 0
    for grad in [*grads, None]:
        full = bucket and (grad is None or grad.dtype != bucket[0].dtype or size + grad.numel() * grad.element_size() > bucket_bytes)
        if full:
            flat = torch.cat([g.reshape(-1) for g in bucket])
            dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
            offset = 0
            for g in bucket:
                g.copy_(flat[offset : offset + g.numel()].view_as(g))
                offset += g.numel()
            bucket, size = [], 0
        if grad is not None:
            bucket.append(grad)
            size += grad.numel() * grad.element_size()


class DataParallelPolicyLearner(PolicyLearner):
    """`PolicyLearner` whose `train_step(shard, loss_fn)` takes this rank's shard of the batch and
    makes the same update as a single-process `train_step` on the whole batch (see module docstring).
    Construct it on every rank after `init_distributed`; rank 0's weights are broadcast to all."""

    def __init__(self, model, *args, group=None, **kwargs):
        broadcast_module(model, group)
        super().__init__(self.distribute(model), *args, **kwargs)
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self._global_norm: LossNormalizer | None = None

    def distribute(self, model):
        """The model this rank trains, made from the full one once rank 0's weights are in it
        (here the model itself: a full replica; reinforge.distributed.fsdp shards it)."""
        return model

    def load_synced_state(self, state: dict) -> None:
        """Rank 0's weights, optimizer state and version (sent with the first batch, see learner_group)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = state["version"]

    def loss_normalizer(self, batch: TrainingBatch) -> LossNormalizer:
        assert self._global_norm is not None, "loss_normalizer is set by train_step"
        return self._global_norm

    def reduce_gradients(self) -> None:
        all_reduce_gradients(self.model.parameters(), self.group)

    def train_step(self, batch: TrainingBatch, loss_fn: LossFn) -> dict[str, float]:
        if len(batch) == 0:
            raise ValueError(f"rank {self.rank} got an empty shard; give every rank at least one sequence")
        counts = torch.tensor([batch.num_loss_tokens, len(batch)], dtype=torch.float64, device=self.device)  # NCCL: on the GPU
        dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=self.group)
        self._global_norm = LossNormalizer(int(counts[0].item()), int(counts[1].item()), self.max_response_tokens)
        try:
            metrics = super().train_step(batch, loss_fn)
        finally:
            self._global_norm = None
        # Extremes (`_max` / `_min` keys, see policy_learner.accumulate_metric) reduce by max / min.
        reduced = {"grad_norm": metrics["grad_norm"]}
        for suffix, op in (("_max", dist.ReduceOp.MAX), ("_min", dist.ReduceOp.MIN), ("", dist.ReduceOp.SUM)):
            keys = sorted(k for k in metrics if k not in reduced and k.endswith(suffix))
            values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=self.device)
            dist.all_reduce(values, op=op, group=self.group)
            reduced.update(zip(keys, values.tolist()))
        return reduced
