"""Predictions made when an item was drawn, waiting for its group's outcome.

Per seat key (reinforge.values.item_seats), a queue oldest first of (embedding, summary, predicted
pass rate, policy): a task drawn again while a group of it is in flight (a partial rollout's) queues
behind it. The sampler (reinforge.values.curriculum_sampler) holds the queues under its lock (the
async producer adds, the learner's thread takes); these are the operations on them.

Every group drawn is observed once, whenever its outcome arrives: in the step that trains it, a
step later for a partial rollout carried over, in the step that dropped it for dynamic sampling (the
loop passes those groups too: a model that never saw an all-equal group would learn that no prompt is
easy or hopeless). A partial group's outcome is not filtered by policy version (as the value heads'
`newest_samples` filter is): the value model's input is the prompt's states at draw time, not the
sampling policy's states, so an outcome is still a correct (prompt, result) pair for a policy at most
trainer.max_staleness versions old, and dropping the carried-over groups would drop the long responses
first and bias the predicted pass rates (the reason partial rollouts keep them for the loss too).
"""

from __future__ import annotations

import torch

from reinforge.rollout.trajectory import Trajectory
from reinforge.values.item_seats import seat_key

Prediction = tuple[torch.Tensor, torch.Tensor, float, str]  # (embedding, summary, predicted pass rate, policy)
Pending = dict[str, list[Prediction]]


def oldest_predictions(pending: Pending, trajectories: list[Trajectory]) -> list[Prediction]:
    """Each sample's seat's oldest prediction, left in place: the group this step trains (groups train
    in the order drawn)."""
    keys = [seat_key(t.task_id, t.agent) for t in trajectories]
    missing = sorted({t.task_id for t, key in zip(trajectories, keys) if key not in pending})
    if missing:
        raise ValueError(f"no prediction was made before sampling task(s) {missing[:3]}")
    return [pending[key][0] for key in keys]


def take_predictions(pending: Pending, trajectories: list[Trajectory]) -> dict[tuple[int, str], Prediction]:
    """Each (group, seat)'s prediction from before sampling, taken off `pending` (in group order: the
    order drawn; a game's seats in seat order)."""
    units = list(dict.fromkeys((t.group_id, seat_key(t.task_id, t.agent)) for t in trajectories))
    missing = sorted({key for _, key in units} - set(pending))
    if missing:  # every group the loop trains on was drawn through next_batch, which predicted it
        raise ValueError(f"no prediction was made before sampling task(s) {missing[:3]}: were they drawn from another sampler?")
    taken = {}
    for unit in sorted(units, key=lambda u: u[0]):  # stable: a group's seats keep their order
        queue = pending.get(unit[1])
        if not queue:
            raise ValueError(f"task {unit[1]} has more groups to learn from than predictions made before sampling it")
        taken[unit] = queue.pop(0)
        if not queue:
            del pending[unit[1]]
    return taken


def pending_from_state(saved: dict, first_policy: str | None) -> Pending:
    """The queues of a checkpoint (one from before versioned draws held one prediction per task; one
    from before several policies, no policy: its run's one policy)."""
    queues = {k: list(v) if isinstance(v, list) else [v] for k, v in saved.items()}
    return {k: [e if len(e) == 4 else (*e, first_policy) for e in q] for k, q in queues.items()}
