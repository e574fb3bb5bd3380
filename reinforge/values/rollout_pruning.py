"""Rollout pruning: stop responses predicted to fail while they are sampled, keeping groups balanced.

ARRoL (Xu et al. 2026, "Prune as You Generate: Online Rollout Pruning for Faster and Better RLVR",
arXiv:2603.24840): a group-relative estimator learns only from groups that hold both successes
and failures, and a failure predicted early need not be sampled to the end. Every
`success_head.check_every` decode steps the engine asks `PruningHook`, which scores each live
row's prefix with the success head (reinforge.models.success_head) and applies `prune_choice` to
each group:

    p_i = p(success | prefix_i);  predicted success: p_i >= tau,  failure: p_i < tau
    n  = rows of the group not pruned (live + finished),  S / F = predicted successes / failures
         among them (a row that finished before any check has no prediction: in n only)
    keep_fail = max(1, ceil(S * (1 - rho) / rho))                    failures a balanced group keeps
    k = max(0, min(#live failures, F - keep_fail, n - min_group_size))
    prune the k live predicted failures with the lowest p

rho = success_head.target_ratio (ARRoL's target fraction of successes, 0.5: as many failures
kept as successes), tau = success_head.fail_below. A group never falls below `min_group_size`
rows, never loses its last predicted failure, and rows predicted to succeed are never pruned.

Pruned rollouts leave the loss (as in ARRoL): they have no outcome, so they are not scored (never
scored as 0), and the group's advantages are computed over the rows that finished. They are
counted in `prune/*` metrics with the tokens they spent and an estimate of the tokens they saved.
"""

from __future__ import annotations

import math

import torch

from reinforge.engines.decode_hook import DecodeCheck
from reinforge.learner.success_head_learner import SuccessHeadLearner
from reinforge.models.success_head import prefix_features
from reinforge.rollout.trajectory import Trajectory


def prune_choice(live: list[float], done: list[float | None], min_group_size: int, target_ratio: float, fail_below: float) -> list[int]:
    """Indices into `live` (predicted success of each live row of a group) to prune now; `done`
    holds the finished, unpruned rows' last predictions (None: finished before any check)."""
    known = [p for p in [*live, *done] if p is not None]
    successes = sum(p >= fail_below for p in known)
    failures = len(known) - successes
    keep_fail = max(1, math.ceil(successes * (1 - target_ratio) / target_ratio))
    live_failures = sorted((p, i) for i, p in enumerate(live) if p < fail_below)
    k = min(len(live_failures), failures - keep_fail, len(live) + len(done) - min_group_size)
    return sorted(i for _, i in live_failures[: max(0, k)])


class PruningHook:
    """The engine's decode hook for one `rollout_groups` call: rows r, r+1, ... of a group are
    consecutive, `group_size` at a time (reinforge.rollout.episodes)."""

    def __init__(self, learner: SuccessHeadLearner, group_size: int):
        cfg = learner.cfg
        self.learner, self.group_size, self.every = learner, group_size, cfg.check_every
        self.min_group_size, self.target_ratio, self.fail_below = cfg.min_group_size, cfg.target_ratio, cfg.fail_below
        self._last: dict[int, float] = {}  # row -> its latest prediction
        self._step = 0

    def __call__(self, check: DecodeCheck) -> torch.Tensor:
        if check.step <= self._step:  # a new generate call (another turn or round): forget the last one
            self._last = {}
        self._step = check.step
        logprobs = check.logprobs.float().cpu()  # the head lives on the CPU; [L, V] logits are small
        count = torch.full((len(check.rows),), check.step)
        features = prefix_features(
            check.logits.cpu(), logprobs.sum(1), logprobs.min(1).values, count, self.learner.budget, torch.zeros(len(count), dtype=torch.bool)
        )
        predicted = self.learner.head.probability(features).tolist()
        rows = check.rows.cpu().tolist()
        self._last.update(zip(rows, predicted))
        finished, pruned = check.finished.cpu(), check.pruned.cpu()
        by_group: dict[int, list[int]] = {}
        for position, row in enumerate(rows):
            by_group.setdefault(row // self.group_size, []).append(position)
        stop = torch.zeros(len(rows), dtype=torch.bool)
        for group, positions in by_group.items():
            members = range(group * self.group_size, (group + 1) * self.group_size)
            done = [self._last.get(r) for r in members if finished[r] and not pruned[r]]
            chosen = prune_choice([predicted[i] for i in positions], done, self.min_group_size, self.target_ratio, self.fail_below)
            stop[[positions[i] for i in chosen]] = True
        return stop


def pruning_metrics(kept: list[Trajectory], pruned: list[Trajectory]) -> dict[str, float]:
    """prune/*: rollouts pruned, their fraction, the tokens they sampled, and the tokens pruning saved,
    estimated per pruned row as (mean length of its group's finished rows) - (its length), >= 0."""
    total = len(kept) + len(pruned)
    lengths: dict[int, list[int]] = {}
    for t in kept:
        lengths.setdefault(t.group_id, []).append(t.num_sampled_tokens)
    saved = sum(
        max(0.0, sum(lengths[t.group_id]) / len(lengths[t.group_id]) - t.num_sampled_tokens) for t in pruned if t.group_id in lengths
    )
    spent = sum(t.num_sampled_tokens for t in pruned)
    return {
        "prune/rollouts": float(len(pruned)),
        "prune/fraction": len(pruned) / total if total else 0.0,
        "prune/tokens_pruned_rows": float(spent),
        "prune/tokens_saved_est": float(saved),
        "prune/tokens_sampled": float(spent + sum(t.num_sampled_tokens for t in kept)),
    }
