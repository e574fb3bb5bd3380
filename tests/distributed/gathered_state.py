"""A sharded optimizer's state gathered whole, for tests that compare it with one process's."""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict:
    """The sharded optimizer's `state_dict()` with every DTensor gathered to a full tensor (a
    collective: every rank calls it), i.e. what a plain optimizer of the whole model would return."""
    state = optimizer.state_dict()
    for index in sorted(state["state"]):  # the same order on every rank
        entry = dict(state["state"][index])  # a copy: state_dict() shares the live per-parameter dicts
        for key in sorted(entry):
            if isinstance(entry[key], DTensor):
                entry[key] = entry[key].full_tensor()
            elif isinstance(entry[key], torch.Tensor):  # the step count: a copy, the live one counts on
                entry[key] = entry[key].clone()
        state["state"][index] = entry
    return state
