"""The critic trained by a learner group's ranks (workers.learners > 1, critic.enabled), as the policy is.

Rank 0 sends the critic's mini-batch (with its returns and old values) to the followers in a STEP
message naming `critic_key(policy)`, and every rank trains on its rows of it (`shard_rows`, the
policy's split). Each rank's loss is divided by the whole mini-batch's masked tokens, so the
gradients summed over the ranks are those of one process on the whole batch; they are clipped by
the global norm and every rank takes the same AdamW step. Metrics are reduced the same way (the
explained variance from summed moments, since no rank holds every prediction).

- workers.sharding=none: every rank holds a replica and all-reduces the gradients before
  clipping (reinforge.distributed.ddp); rank 0's replica is the loop's value model.
- workers.sharding=fsdp: the value model is FSDP2-sharded over the same ranks as the policy, the
  same way (reinforge.distributed.fsdp.shard_model: each decoder layer of its trunk, then the root,
  which holds the embeddings, the final norm and the value head); the backward reduce-scatters.

V(s) for the advantages (`values(batch)`, called by the loop between updates) comes from a full
copy on rank 0: when sharded, the new weights are all-gathered into rank 0's full value model after
every step, as the policy's are. Why not a sharded forward with every rank taking part: it would
need a message and every follower's attention for each advantage pass, at a moment the loop runs
no collective (the reference, the advantages and a checkpoint's full weights all read rank 0's
models alone), and would make a follower that died there hang the advantage step instead of the
update; the full copy costs rank 0 one critic's weights, which it holds anyway as the
checkpoint's `critic.model`.

Checkpoints: a sharded critic's shards and AdamW moments are written by every rank with the
policy's, under the key `critic_key(policy)` of the same DCP directory
(reinforge.distributed.sharded_checkpoint), and state.pt's critic optimizer entry names them
(`sharded_entry`), so resuming at the same world size reads back every rank's own bytes, and
another world size reshards. Replicas' state is rank 0's, whole, in state.pt; the followers take
it with the first update (`DriverCritic.synced_state`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from transformers import AutoModel, PretrainedConfig

from reinforge.config import ConfigError
from reinforge.distributed.ddp import all_reduce_gradients, broadcast_module, shard_rows
from reinforge.distributed.fsdp import ShardedDriverSync, gather_full_weights, load_rank0_state, shard_model
from reinforge.distributed.fsdp_policies import fully_shard_options
from reinforge.distributed.sharded_checkpoint import load_shards
from reinforge.distributed.sharded_forward import under_root
from reinforge.learner.batch import TrainingBatch, micro_batches
from reinforge.learner.critic_learner import CriticLearner
from reinforge.models.value_model import ValueModel

CRITIC_PREFIX = "critic/"  # a critic's name in the group's messages and in the sharded checkpoint


def critic_key(policy: str) -> str:
    return CRITIC_PREFIX + policy


@dataclasses.dataclass
class CriticSpec:
    """What a follower needs to build the same critic learner as rank 0 (pickled with FollowerSpec)."""

    trunk_config: PretrainedConfig
    num_bins: int | None
    support: tuple[float, float]
    options: dict[str, Any]  # CriticLearner's keyword arguments (`CriticLearner.options`)

    @classmethod
    def of(cls, critic: CriticLearner) -> "CriticSpec":
        model = critic.model
        return cls(model.trunk.config, model.num_bins, model.support, dict(critic.options))

    def build_model(self, device: str) -> ValueModel:
        """The value model's architecture; its weights come from rank 0 (broadcast)."""
        return ValueModel(AutoModel.from_config(self.trunk_config), num_bins=self.num_bins, support=self.support).to(device)


def explained_variance_from_sums(count: float, sum_r: float, sum_r2: float, sum_e: float, sum_e2: float) -> float:
    """1 - Var[R - V] / Var[R] from the masked sums of R, R^2, E = R - V and E^2 (summed over the
    ranks' shards), as reinforge.algos.losses.value.explained_variance computes it from every value."""
    if count < 1:
        return float("nan")
    var_r = sum_r2 / count - (sum_r / count) ** 2
    if var_r <= 1e-12:
        return float("nan")
    return 1.0 - (sum_e2 / count - (sum_e / count) ** 2) / var_r


class DataParallelCriticLearner(CriticLearner):
    """`CriticLearner` whose `train_step` takes this rank's shard of the mini-batch and makes, with the
    other ranks, the update one process makes on the whole of it: each rank's loss is divided by the
    whole mini-batch's masked tokens, so the gradients summed over the ranks are the whole batch's.
    Here every rank holds a full replica (workers.sharding=none) and the gradients are all-reduced
    before clipping (reinforge.distributed.ddp). Construct it on every rank, in the same order, after
    the process group forms: rank 0's weights are broadcast."""

    def __init__(self, value_model: ValueModel, group=None, **options):
        broadcast_module(value_model, group)
        super().__init__(self.distribute(value_model), **options)
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self._batch_tokens = 0

    def distribute(self, model: ValueModel) -> torch.nn.Module:
        """The model this rank trains, once rank 0's weights are in it (here the replica itself)."""
        return model

    def train_step(self, batch: TrainingBatch, returns: torch.Tensor, old_values: torch.Tensor) -> dict[str, float]:
        if len(batch) == 0:
            raise ValueError(f"critic rank {self.rank} got an empty shard; give every rank at least one sequence")
        tokens = torch.tensor([batch.num_loss_tokens], dtype=torch.float64, device=self.device)  # NCCL: on the GPU
        dist.all_reduce(tokens, op=dist.ReduceOp.SUM, group=self.group)
        self._batch_tokens = int(tokens.item())
        return super().train_step(batch, returns, old_values)

    def loss_normalizer(self, batch: TrainingBatch) -> float:
        return float(max(self._batch_tokens, 1))

    def reduce_gradients(self) -> None:
        all_reduce_gradients(self.trained_model.parameters(), self.group)

    def clip_gradients(self) -> torch.Tensor:
        self.reduce_gradients()
        norm = super().clip_gradients()
        return norm.full_tensor() if isinstance(norm, DTensor) else norm  # over DTensor shards: the global norm

    def step_metrics(self, predicted, returns, mask, loss_sum, clipped_tokens, normalizer, grad_norm) -> dict[str, float]:
        m = mask.to(torch.float64)
        r = returns.detach().to(torch.float64) * m
        e = r - predicted.detach().to(torch.float64) * m
        sums = torch.tensor(
            [loss_sum, (predicted * mask).sum().item(), clipped_tokens, m.sum().item(), r.sum().item(), (r * r).sum().item(),
             e.sum().item(), (e * e).sum().item()],
            dtype=torch.float64, device=self.device,
        )
        dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=self.group)
        loss, value_sum, clipped, count, sum_r, sum_r2, sum_e, sum_e2 = sums.tolist()
        metrics = {
            "value_loss": loss,
            "explained_variance": explained_variance_from_sums(count, sum_r, sum_r2, sum_e, sum_e2),
            "value_mean": value_sum / normalizer,
            "value_grad_norm": grad_norm.item(),
        }
        if not self.spec.uses_bins:
            metrics["value_clip_frac"] = clipped / normalizer
        return metrics

    def load_synced_state(self, state: dict) -> None:
        """Rank 0's weights, optimizer state and version (sent with the first batch)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = state["version"]


class ShardedCriticLearner(DataParallelCriticLearner):
    """`DataParallelCriticLearner` over an FSDP2-sharded value model (workers.sharding=fsdp): the
    model given is sharded in place after rank 0's weights are broadcast; the backward
    reduce-scatters (sums) the gradients; after every step the full weights are gathered (every
    rank takes part) into `gather_into`: rank 0's full value model, else nowhere."""

    gather_into: torch.nn.Module | None = None
    copy_before_sharding = False  # rank 0 of a group: train a sharded copy, keep the full value model

    def __init__(self, value_model: ValueModel, precision: str = "fp32", offload: bool = False, group=None, **options):
        self._shard_options = fully_shard_options(precision, offload)
        super().__init__(value_model, group=group, **options)
        self.device = self._compute_device
        self._micro_batches = 0

    def distribute(self, model: ValueModel) -> torch.nn.Module:
        self._compute_device = next(model.parameters()).device  # not the shards': offloaded, they live on the host
        return shard_model(model, copy_first=self.copy_before_sharding, **self._shard_options)

    @property
    def sharded_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizer

    def train_step(self, batch: TrainingBatch, returns: torch.Tensor, old_values: torch.Tensor) -> dict[str, float]:
        # Every forward gathers shards with all ranks: all must run as many micro-batches.
        micros = len(micro_batches(batch.attention_mask, self.micro_batch_size, self.max_tokens_per_microbatch))
        most = torch.tensor([micros], device=self.device)
        dist.all_reduce(most, op=dist.ReduceOp.MAX, group=self.group)
        self._micro_batches = int(most.item())
        metrics = super().train_step(batch, returns, old_values)
        gather_full_weights(self.trained_model, self.gather_into)
        return metrics

    def micro_loss(self, micro, returns, old_values):
        # `logits` (HL-Gauss) is no forward of the root: run the whole micro-batch as one, so the
        # root's weights (embeddings, norm, value head) are gathered for it (reinforge.distributed.sharded_forward).
        return under_root(self.trained_model, super().micro_loss, micro, returns, old_values)

    def pad_micro_batches(self, batch: TrainingBatch, done: int) -> None:
        """Passes of a zero loss on one row, up to the most micro-batches a rank runs: the same
        collectives as a real pass, gradients unchanged (+0)."""
        for _ in range(self._micro_batches - done):
            micro = batch.select(slice(0, 1)).to(self.device)
            zeros = torch.zeros(micro.loss_mask.shape, device=self.device)
            per_token, _, _ = self.micro_loss(micro, zeros, zeros)
            (per_token.sum() * 0.0).backward()

    def reduce_gradients(self) -> None:
        """Nothing: FSDP reduce-scatters (sums) each layer's gradient during the backward."""

    def load_synced_state(self, state: dict) -> None:
        """Rank 0's full weights, plain optimizer state and version, tensor by tensor (fsdp.load_rank0_state)."""
        load_rank0_state(self.trained_model, self.sharded_optimizer, state)
        self.version = state["version"]


class FollowerCritic:
    """A follower's critic, served like its policy learners (learner_group.serve_follower): its
    `train_step(shard, _)` reads the returns and old values the shard carries."""

    def train_step(self, batch: TrainingBatch, loss_fn=None) -> dict[str, float]:
        return super().train_step(batch, batch.returns, batch.old_values)


class ReplicaFollowerCritic(FollowerCritic, DataParallelCriticLearner):
    pass


class ShardedFollowerCritic(FollowerCritic, ShardedCriticLearner):
    pass


class DriverCritic:
    """Rank 0's critic in a learner group: `train_step` takes the whole mini-batch, as
    `CriticLearner` does, sends it (with its returns and old values) to the followers and trains on
    its own rows. The first update also sends rank 0's state (`synced_state`: the weights and
    optimizer state a resume may have loaded), so every rank starts from it."""

    name: str
    _followers_synced = False

    def follower_failure(self, err: BaseException) -> RuntimeError | None:
        """Set by the group: the error naming a follower that died, if one did."""
        return None

    def train_step(self, batch: TrainingBatch, returns: torch.Tensor, old_values: torch.Tensor) -> dict[str, float]:
        from reinforge.distributed.group_messages import STEP

        if len(batch) < self.world_size:
            raise ConfigError(
                f"a critic mini-batch of {len(batch)} sequences cannot be split over workers.learners={self.world_size} (one "
                "sequence each at least): lower workers.learners or algo.mini_batches, or raise rollout.prompts_per_step"
            )
        whole = dataclasses.replace(batch, returns=returns, old_values=old_values)
        state = None
        if not self._followers_synced:
            state = self.synced_state()
            self._followers_synced = True
        try:
            dist.broadcast_object_list([(STEP, self.name, whole, state)], src=0, group=self.group)
            if state is not None:
                self.state_sent(state)
            shard = whole.select(shard_rows(len(whole), self.rank, self.world_size))
            return super().train_step(shard, shard.returns, shard.old_values)
        except RuntimeError as err:  # a collective failed: because a follower died?
            failure = self.follower_failure(err)
            if failure is None:
                raise
            raise failure from err

    def synced_state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "version": self.version}

    def state_sent(self, state: dict) -> None:
        """After the followers were sent `state`: nothing here (this rank's model is the state)."""

    def release(self) -> None:
        """Once the group is gone: drop what holds it (a replica holds nothing of it)."""


class ReplicaDriverCritic(DriverCritic, DataParallelCriticLearner):
    """Rank 0's critic among replicas (workers.sharding=none): it trains the loop's value model itself."""

    def __init__(self, critic: CriticLearner, name: str):
        super().__init__(critic.model, **critic.options)
        self.name, self.version = name, critic.version


class ShardedDriverCritic(ShardedDriverSync, DriverCritic, ShardedCriticLearner):
    """Rank 0's critic in a sharded group. `model` stays the full value model the loop reads
    (`values` for the advantages, the checkpoint's weights); the update trains a sharded copy
    (`trained_model`) and gathers the new weights back into `model` after every step. `optimizer`
    is rank 0's view of the sharded AdamW (learner_group.DriverOptimizer): in a checkpoint, the
    shards every rank writes."""

    copy_before_sharding = True  # the sharded copy is made layer by layer (fsdp.copied_layer_by_layer)

    def __init__(self, critic: CriticLearner, name: str, precision: str = "fp32", offload: bool = False):
        from reinforge.distributed.driver_optimizer import DriverOptimizer

        full = critic.model
        super().__init__(full, precision=precision, offload=offload, **critic.options)
        self.sharded, self.model = self.model, full
        self.gather_into = full
        self.name = name
        self.optimizer = DriverOptimizer(self.optimizer, self)
        self.version = critic.version

    @property
    def trained_model(self) -> torch.nn.Module:
        return self.sharded

    @property
    def sharded_optimizer(self) -> torch.optim.Optimizer:
        return self.optimizer.inner

    def load_shards(self, entry: dict) -> None:
        """Every rank loads its shards of a sharded checkpoint (the followers on a LOAD_SHARDS message)."""
        from reinforge.distributed.group_messages import LOAD_SHARDS

        dist.broadcast_object_list([(LOAD_SHARDS, self.name, None, entry)], src=0, group=self.group)
        load_shards(self.sharded, self.sharded_optimizer, entry)

    def release(self) -> None:
        """Drop the sharded copy and its optimizer (their device mesh holds the process group); the full `model` stays."""
        self.sharded, self.optimizer.inner = None, None


def follower_critic(model: ValueModel, spec: CriticSpec, sharding: str, options: dict) -> DataParallelCriticLearner:
    """A follower's critic learner (in rank 0's order: `driver_critics`). `options`: how FSDP shards."""
    if sharding == "fsdp":
        return ShardedFollowerCritic(model, **options, **spec.options)
    return ReplicaFollowerCritic(model, **spec.options)


def driver_critics(critics: dict[str, CriticLearner | None], sharding: str, options: dict) -> dict[str, DriverCritic]:
    """Rank 0's critic learners by policy name, in the followers' order; a collective (each
    broadcasts rank 0's weights). `options`: how FSDP shards (FollowerSpec.learner_options)."""
    driver = {}
    for name, critic in critics.items():
        if critic is not None:
            key = critic_key(name)
            driver[name] = ShardedDriverCritic(critic, key, **options) if sharding == "fsdp" else ReplicaDriverCritic(critic, key)
    return driver


def critic_specs(critics: dict[str, CriticLearner | None]) -> dict[str, CriticSpec]:
    """What the followers build, by `critic_key`, for each policy that has a critic."""
    return {critic_key(name): CriticSpec.of(critic) for name, critic in critics.items() if critic is not None}
