"""Advantages computed once per episode when some episodes came as several trajectories.

The estimator sees one row per episode, its lead piece (rollout.episode_parts), with the episode's
reward: for a group-relative estimator (GRPO, Shao et al. 2024, arXiv:2402.03300:
A_i = (r_i - mean_g r) / (std_g r + eps) over the G episodes of group g) the group holds G rows
whether or not some episode was split, so the baseline and the normalization are the same as if
no episode had been split. Each other piece is then trained with its lead's advantage:

    A(piece) = A(lead of its episode)

That is exact for outcome estimators (one advantage per sample). A per-token estimator (gae,
reinforce_pp: [N, T] advantages, computed along one token sequence) has no sequence for a split
episode as a whole: its lead piece is trained with the advantages computed on it, and the other
pieces are left out of the loss (counted as `split_pieces_untrained`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from reinforge.algos.types import AdvantageInputs, AdvantageOutput
from reinforge.rollout.episode_parts import lead_rows
from reinforge.rollout.trajectory import Trajectory


def _rows(value, rows: torch.Tensor):
    if isinstance(value, torch.Tensor) and value.dim() >= 1:
        return value[rows]
    if isinstance(value, dict):
        return {k: _rows(v, rows) for k, v in value.items()}
    return value


def per_episode_advantages(
    estimator: Callable[[AdvantageInputs], AdvantageOutput], inputs: AdvantageInputs, trajectories: list[Trajectory]
) -> tuple[AdvantageOutput, torch.Tensor | None]:
    """The estimator's output for every row, and the rows to leave out of the loss (None: none).
    With no split episode, exactly `estimator(inputs)`."""
    leads = lead_rows(trajectories)
    if all(lead == i for i, lead in enumerate(leads)):
        return estimator(inputs), None
    lead_index = torch.tensor(sorted(set(leads)))
    position = {int(row): k for k, row in enumerate(lead_index)}
    fields = {f.name: _rows(getattr(inputs, f.name), lead_index) for f in dataclasses.fields(inputs)}
    fields["reward_weights"] = inputs.reward_weights
    out = estimator(AdvantageInputs(**fields))
    gather = torch.tensor([position[lead] for lead in leads])
    if out.advantages.dim() == 1:
        returns = out.returns[gather] if out.returns is not None else None
        return AdvantageOutput(out.advantages[gather], returns, out.metrics), None
    # Per-token advantages belong to the lead's own tokens: the other pieces are not trained.
    n = len(trajectories)
    advantages = out.advantages.new_zeros((n, *out.advantages.shape[1:]))
    advantages[lead_index] = out.advantages
    returns = None
    if out.returns is not None:
        returns = out.returns.new_zeros((n, *out.returns.shape[1:]))
        returns[lead_index] = out.returns
    untrained = torch.tensor([lead != i for i, lead in enumerate(leads)])
    metrics = {**out.metrics, "split_pieces_untrained": float(untrained.sum())}
    return AdvantageOutput(advantages, returns, metrics), untrained
