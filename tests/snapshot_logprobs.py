"""Which weights sampled a batch: the learner's log-probs of its sampled tokens under a given weights
snapshot, against the behaviour log-probs the engine recorded (equal within float noise only for the
snapshot that sampled them). For tests of the async schedule, whose producer samples with older
snapshots than the learner holds."""

from __future__ import annotations

import torch

from float_bounds import logit_bound
from reinforge.learner.batch import collate


def sampled_rows(trajectories: list) -> list:
    """The trajectories with at least one sampled token (an agent that never called the model, a seat
    that never got to move: nothing to compare)."""
    return [t for t in trajectories if any(t.loss_mask)]


@torch.no_grad()
def gap_under(learner, trajectories: list, pad: int, state: dict) -> tuple[float, float]:
    """(max |log-prob under `state` - behaviour log-prob| over the sampled tokens, its float-noise
    bound); the learner's own weights are put back bit for bit."""
    batch = collate(trajectories, None, pad)
    live = {k: v.clone() for k, v in learner.model.state_dict().items()}
    bound = logit_bound(learner.model, [t.token_ids for t in trajectories])
    try:
        learner.model.load_state_dict(state)
        logprobs = learner.logprobs(batch)
    finally:
        learner.model.load_state_dict(live)
    gaps = (logprobs.double() - batch.old_logprobs.double()).abs()[batch.loss_mask]
    return gaps.max().item(), bound
