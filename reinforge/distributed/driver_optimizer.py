"""Rank 0's handle on a sharded optimizer (reinforge.distributed.learner_group, critic_group)."""

from __future__ import annotations

import copy

import torch

from reinforge.distributed.sharded_checkpoint import sharded_entry


class DriverOptimizer:
    """Rank 0's handle on a sharded optimizer: steps it. Its `state_dict()` is the entry a checkpoint
    keeps for the shards every rank writes (`LearnerGroup.write_shards`); `load_state_dict` takes a
    plain optimizer's state_dict of the whole model (a checkpoint of an unsharded run) and keeps it
    until the next update, whose first message carries it to every rank."""

    def __init__(self, inner: torch.optim.Optimizer, driver):  # driver: learner_group.ShardedDriverLearner
        self.inner, self.driver, self.pending = inner, driver, None

    @property
    def param_groups(self) -> list[dict]:
        return self.inner.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.inner.step()

    def state_dict(self) -> dict:
        if self.pending is not None:  # loaded, not yet sent to the ranks: their shards do not hold it
            return copy.deepcopy(self.pending)
        return sharded_entry(self.driver.name, self.driver.world_size)

    def load_state_dict(self, state: dict) -> None:
        if any(not isinstance(index, int) for index in state.get("state", {})):
            raise ValueError("workers.sharding=fsdp loads a plain optimizer state_dict (parameters numbered); this one is not")
        self.pending = copy.deepcopy(state)
        self.driver._followers_synced = False  # the next update sends it (with rank 0's weights)
