"""A sharded data-parallel policy learner: FSDP2 (`torch.distributed.fsdp.fully_shard`), `workers.sharding=fsdp`.

Each rank keeps 1/N of every weight, gradient and AdamW moment (DTensor shards): the decoder
layers are sharded one by one, then the root (embeddings, final norm, head), so a forward
all-gathers one layer at a time and frees it after, and the backward reduce-scatters each layer's
gradient. The update is the data-parallel one (reinforge.distributed.ddp): every rank trains on
its shard of the batch with losses normalized by the whole batch's counts, so the gradients are
*summed* over the ranks (FSDP's default divides by the world size: turned off here), clipped by
the global norm and stepped by AdamW on the shards.

Everything outside the update reads full weights on rank 0, the loop's model: its in-process
engine samples it; evaluation samples through that engine; log-probs outside the update (a
LoRA reference's, adapters off; an advantage's extra terms) are its forwards; checkpoints' `model/` and
`final/` are written from it (safetensors writes from the tensors, no copy); Ray workers and vLLM
are sent its weights; a LoRA policy's engine reads its adapters unmerged. (A reference model and a
critic are other models.) `gather_full_weights` all-gathers the update into it parameter by
parameter after every step: one full parameter in flight at a time, freed before the next.

No second full copy on rank 0 (issue 30, item 3). Two designs: (a) no full loop model at all,
the gather writing each parameter straight into the engine's copy and every policy forward
outside the update run sharded, with the followers, through a message; (b) the loop's model stays
rank 0's one full copy and the engine samples it without a copy of its own. (b) is what runs: it
touches one seam (the engine's decoder, reinforge.engines.borrowed_decoder, chosen by
`TorchEngine(borrow_weights=True)` when workers.sharding=fsdp) instead of every reader above, and
costs a slower decode (separate q/k/v and gate/up matmuls over the model's [out, in] matrices:
docs/scaling.md has the number). Ray workers get the weights one tensor per object
(reinforge.distributed.ray_engine). What still holds a second copy on rank 0: the async schedule's
producer (a snapshot of another version, by design), a bf16 engine over a float32 model (a
half-size cast); vLLM is sent the model's own tensors one per message. Rank 0's sharded copy is made
one decoder layer at a time (`copied_layer_by_layer`), and rank 0's weights and a loaded plain
optimizer state reach the other ranks tensor by tensor (`ShardedDriverSync`, `load_rank0_state`),
never as one message. Checkpoints hold the AdamW
state as every rank's shards (reinforge.distributed.sharded_checkpoint); `load_full_optimizer_state`
loads a plain optimizer's `state_dict()` (full tensors, parameters by position: an unsharded run's
checkpoint) into the shards.
"""

from __future__ import annotations

import copy
import dataclasses

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from reinforge.distributed.ddp import DataParallelPolicyLearner
from reinforge.distributed.fsdp_policies import fully_shard_options
from reinforge.distributed.sharded_forward import register_sharded_forwards, under_root
from reinforge.learner.batch import micro_batches
from reinforge.runtime.resume_changes import load_optimizer_state

LAYER_LISTS = ("layers", "h", "blocks", "block")  # Llama/Qwen/Mistral, GPT-2, ...: the base model's attribute


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layers of a Hugging Face causal LM (`base_model.layers`, `.h`, ...), or a
    ValueError naming the model's class. `base_model` is followed down to the innermost one: under
    LoRA, peft's PeftModel -> LoraModel -> the transformer (base_model.model.model.layers)."""
    base = model
    while (inner := getattr(base, "base_model", base)) is not base:
        base = inner
    for name in LAYER_LISTS:
        layers = getattr(base, name, None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0:
            return layers
    raise ValueError(
        f"workers.sharding=fsdp cannot find the decoder layers of {type(model).__name__} (looked for a ModuleList at "
        f"base_model.{' / .'.join(LAYER_LISTS)}): set workers.sharding=none"
    )


def shard_model(model: torch.nn.Module, copy_first: bool = False, **options) -> torch.nn.Module:
    """FSDP2 over the default process group: each decoder layer, then the root (`options`: of
    `fully_shard`, reinforge.distributed.fsdp_policies). Gradients are summed over the ranks, not
    averaged (the losses are already normalized by the whole batch). `copy_first`: shard a copy
    and leave `model` as it is (rank 0 keeps its full model), the copy made layer by layer
    (`copied_layer_by_layer`)."""
    if copy_first:
        model = copied_layer_by_layer(model, lambda layer: fully_shard(layer, **options))
    else:
        for layer in decoder_layers(model):
            fully_shard(layer, **options)
    layers = decoder_layers(model)
    fully_shard(model, **options)
    register_sharded_forwards(model, layers)  # the packed forward and chunked log-softmax, under FSDP's hooks
    for module in model.modules():
        if hasattr(module, "set_gradient_divide_factor"):
            module.set_gradient_divide_factor(1.0)
            # A plain SUM reduce-scatter (else a divisor of 1 becomes PREMUL_SUM, which gloo lacks).
            module.set_force_sum_reduction_for_comms(True)
    return model


def copied_layer_by_layer(model: torch.nn.Module, shard_layer) -> torch.nn.Module:
    """A deep copy of `model` whose decoder layers get their tensors one layer at a time, each
    layer handed to `shard_layer` (which frees its full weights) before the next is filled: beside
    `model`, at most the root's own tensors (embeddings, final norm, head) and one layer exist
    twice, where a whole `copy.deepcopy` made a second full model first. One deep copy of the
    structure (the config and every other shared object copied once, as `copy.deepcopy` does),
    with the layers' parameters and buffers left out of it (None) until their turn."""
    layers = decoder_layers(model)
    later = {id(t): None for layer in layers for t in (*layer.parameters(), *layer.buffers())}
    shell = copy.deepcopy(model, later)
    for layer, copied in zip(layers, decoder_layers(shell), strict=True):
        for name, tensor in (*layer.named_parameters(), *layer.named_buffers()):
            owner_name, _, leaf = name.rpartition(".")
            owner = copied.get_submodule(owner_name)
            slots = owner._parameters if leaf in owner._parameters else owner._buffers
            slots[leaf] = copy.deepcopy(tensor)  # a Parameter stays one, with its requires_grad
        shard_layer(copied)
    return shell


@torch.no_grad()
def gather_full_weights(sharded: torch.nn.Module, into: torch.nn.Module | None = None) -> None:
    """All-gather each trained parameter of `sharded` (a collective: every rank calls it) and copy
    it into the same-named parameter of `into` (rank 0's full model; None on the other ranks).
    Frozen ones (a LoRA base) are skipped: no step changes them, every rank skips the same."""
    targets = dict(into.named_parameters()) if into is not None else {}
    for name, param in sharded.named_parameters():
        if not param.requires_grad:
            continue
        full = param.full_tensor() if isinstance(param, DTensor) else param
        if into is not None:
            targets[name].copy_(full)
        del full  # freed before the next one is gathered: one full parameter in flight, not two


@dataclasses.dataclass(frozen=True)
class TensorSlot:
    """Where a plain optimizer state holds a tensor that rank 0 sends on its own: its shape and dtype."""

    shape: tuple[int, ...]
    dtype: torch.dtype


def optimizer_skeleton(state: dict) -> dict:
    """A plain optimizer `state_dict()` with every tensor of more than one element replaced by its
    `TensorSlot`: what the other ranks are sent, the moments following one at a time
    (`load_full_optimizer_state`)."""
    return {
        "param_groups": state["param_groups"],
        "state": {
            index: {
                key: TensorSlot(tuple(value.shape), value.dtype) if isinstance(value, torch.Tensor) and value.numel() > 1 else value
                for key, value in entry.items()
            }
            for index, entry in state["state"].items()
        },
    }


def load_full_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load a plain optimizer `state_dict()` (full tensors, as checkpoints hold) into the sharded
    optimizer, on every rank: rank 0 passes the state, the others its `optimizer_skeleton`, and
    each moment is scattered from rank 0 one at a time, each rank keeping its shard (no rank
    receives the whole state). The hyperparameters the optimizer was built with stay (as
    load_optimizer_state does)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if any(not isinstance(index, int) for index in state["state"]):
        raise ValueError("the optimizer state is not a plain optimizer's state_dict (its parameters are not numbered)")
    local = {"param_groups": state["param_groups"], "state": {}}
    for index, entry in state["state"].items():
        param = params[index]
        local["state"][index] = {}
        for key, value in entry.items():
            if isinstance(value, TensorSlot):  # not rank 0: a buffer of the shape, which only the scatter's metadata reads
                value = torch.empty(value.shape, dtype=value.dtype, device=param.device)
            if isinstance(value, torch.Tensor) and value.shape == param.shape and isinstance(param, DTensor):
                value = distribute_tensor(value, param.device_mesh, param.placements, src_data_rank=0)
            elif isinstance(entry[key], TensorSlot):  # the skeleton only carries what the shards scatter
                raise ValueError(f"optimizer state {index}.{key} {entry[key].shape} is not laid out like its parameter {tuple(param.shape)}")
            local["state"][index][key] = value
    load_optimizer_state(optimizer, local)


def load_rank0_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Every rank of a sharded group: rank 0's full weights (`state["model"]`; None on the other
    ranks) broadcast one tensor at a time, each rank keeping its shard, then its plain optimizer
    state (None: nothing to load; the other ranks hold its skeleton), moment by moment."""
    weights = state["model"] if state["model"] is not None else {}
    set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    if state["optimizer"] is not None:
        load_full_optimizer_state(optimizer, state["optimizer"])


class ShardedDriverSync:
    """Rank 0 of a sharded group (the policy's and the critic's driver): what the first update
    sends. The message carries the version and the skeleton of a loaded optimizer state; rank 0's
    full weights and moments follow it tensor by tensor (`load_rank0_state`), so no rank unpickles
    a whole model or optimizer state."""

    def synced_state(self) -> dict:
        self._sending = self.optimizer.pending  # a plain state loaded from an unsharded checkpoint, or None
        self.optimizer.pending = None
        skeleton = None if self._sending is None else optimizer_skeleton(self._sending)
        return {"model": None, "optimizer": skeleton, "version": self.version}

    def state_sent(self, state: dict) -> None:
        sending, self._sending = self._sending, None
        self.load_synced_state({**state, "model": self.model.state_dict(), "optimizer": sending})


class ShardedPolicyLearner(DataParallelPolicyLearner):
    """`DataParallelPolicyLearner` over an FSDP2-sharded model: the same `train_step(shard)`
    contract and update; the model given is sharded in place after rank 0's weights are broadcast.
    After every step the full weights are gathered (every rank takes part) into `gather_into`:
    rank 0's full model in a learner group (reinforge.distributed.learner_group), else nowhere."""

    gather_into: torch.nn.Module | None = None
    copy_before_sharding = False  # rank 0 of a group: train a sharded copy, keep the full model

    def __init__(self, *args, precision: str = "fp32", offload: bool = False, **kwargs):
        """`precision` (fp32 / bf16) and `offload`: reinforge.distributed.fsdp_policies."""
        self._shard_options = fully_shard_options(precision, offload)
        super().__init__(*args, **kwargs)
        self.device = self._compute_device  # not the shards' device: offloaded, they live on the host

    def micro_batch_logprobs(self, micro, entropy: bool = True):
        # The packed forward and the chunked log-softmax read the root's weights (embeddings, head)
        # outside `model(...)`: they run as a forward of the root (reinforge.distributed.sharded_forward).
        return under_root(self.trained_model, super().micro_batch_logprobs, micro, entropy)

    @property
    def sharded_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizer

    def train_step(self, batch, loss_fn) -> dict[str, float]:
        # Every forward and backward gathers and reduces shards with all ranks: all ranks must run
        # as many micro-batches, so a rank with fewer (shards differ by a row) pads with passes
        # that add exactly nothing (`pad_micro_batches`).
        count = torch.tensor(  # on the learner's device: NCCL reduces no CPU tensor
            [len(micro_batches(batch.attention_mask, self.micro_batch_size, self.max_tokens_per_microbatch))], device=self.device,
        )
        dist.all_reduce(count, op=dist.ReduceOp.MAX, group=self.group)
        self._micro_batches = int(count.item())
        metrics = super().train_step(batch, loss_fn)
        gather_full_weights(self.trained_model, self.gather_into)
        return metrics

    def distribute(self, model: torch.nn.Module) -> torch.nn.Module:
        self._compute_device = next(model.parameters()).device
        return shard_model(model, copy_first=self.copy_before_sharding, **self._shard_options)

    def pad_micro_batches(self, batch, done: int) -> None:
        """Forwards and backwards of a zero loss on one row, up to the most micro-batches a rank
        runs: the same collectives as a real pass, gradients unchanged (+0), no metrics."""
        for _ in range(self._micro_batches - done):
            micro = batch.select(slice(0, 1)).to(self.device)
            with self._autocast():
                logprobs, _ = self.micro_batch_logprobs(micro, entropy=False)
            (logprobs.sum() * 0.0).backward()

    def reduce_gradients(self) -> None:
        """Nothing: FSDP reduce-scatters (sums) each layer's gradient during the backward."""

    def clip_gradients(self) -> torch.Tensor:
        norm = torch.nn.utils.clip_grad_norm_(self.trainable, self.max_grad_norm)
        return norm.full_tensor() if isinstance(norm, DTensor) else norm

    def load_synced_state(self, state: dict) -> None:
        """Rank 0's full weights, plain optimizer state and version (`load_rank0_state`): no rank
        holds a second full copy (a message would carry them all, pickled, to every rank)."""
        load_rank0_state(self.trained_model, self.sharded_optimizer, state)
        self.version = state["version"]
