"""A resumed run's config wins over the state its checkpoint restores.

`reinforge train --resume RUN --force KEY=VALUE` may change keys that the checkpoint also carries a
value for. Restoring the state as saved would silently undo the change: torch's
`Optimizer.load_state_dict` brings back the saved param groups' learning rate and weight decay, and
the reward cache would keep serving scores of a reward function that was since replaced. Here the
restored state is adjusted to the config; keys whose change cannot be applied (the model, the
tasks, the seed, ...) are refused before any compute by `reinforge.config_resume.resume_config`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from reinforge.config import RewardComponent


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load the saved moments and step counts, keeping the hyperparameters the optimizer was built
    with (lr, weight decay, betas, ...): those come from the config, which --force may have changed.

    Without a change the values are the same floats, so an unchanged resume stays bitwise exact.
    A learning-rate schedule would also keep its base rate in each group's `initial_lr` and in the
    scheduler's `base_lrs`; the RL learners have none (a constant rate), and the supervised warm-up,
    which has one, is never resumed mid-way (a run killed during it starts over).
    """
    with configured_hyperparameters(optimizer):
        optimizer.load_state_dict(state)


@contextmanager
def configured_hyperparameters(optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """Whatever state the block loads into `optimizer`, its param groups keep the hyperparameters
    they had before it (see load_optimizer_state)."""
    configured = [{key: value for key, value in group.items() if key != "params"} for group in optimizer.param_groups]
    yield
    for group, values in zip(optimizer.param_groups, configured, strict=True):
        group.update(values)


def reward_spec(components: list[RewardComponent]) -> dict[str, dict[str, Any]]:
    """What each reward component computes (its function and parameters; its weight is applied
    after the cache): saved with a checkpoint, so that a resume can tell which components changed."""
    return {c.name: {"fn": c.fn, "params": c.params} for c in components}


def scorer_state_for(state: dict[str, Any], saved_spec: dict[str, Any] | None, spec: dict[str, Any]) -> dict[str, Any]:
    """The scorer's saved state without what belongs to a component whose function or parameters
    changed: its cached scores (keys end with the component's name) and a stateful function's state.

    `saved_spec` is None for checkpoints written before reward specs were saved: kept as they are.
    """
    if saved_spec is None:
        return state
    changed = {name for name, now in spec.items() if saved_spec.get(name) != now}
    if not changed:
        return state
    return {
        **state,
        "cache": [(key, value) for key, value in state["cache"] if key[-1] not in changed],
        "components": {name: s for name, s in state["components"].items() if name not in changed},
    }
