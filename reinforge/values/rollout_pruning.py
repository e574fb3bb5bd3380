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

The same checks run on any engine, in multi-turn episodes and in partial rollouts between chunks of
sampling (`PruningHook.check_prefixes`, reinforge.rollout.pruned_sampling): the head reads the
policy's logits at each live prefix from one forward of the in-process model with the sampling
weights, and the choice per group is the same `prune_groups` / `prune_choice` (docs/rollout_pruning.md).

Games and gateway agents (`PruningHook.for_rows`, reinforge.engines.decode_hook.RowGroups): an
episode there is a game (one trajectory per policy seat) or an agent's episode (one trajectory per
piece), sampled over many generate calls. ARRoL's rule is applied to *units*, not rows: a group is
still a task's group (the games of one game setup, the agent episodes of one task), a member is a
game or an agent episode, and each check of a generate call scores the units that have a live row
in it (the prefix of the move or the reply being sampled: the head is trained on each seat's final
turn with the seat's outcome, and on each piece's final turn with its episode's outcome). The
group's units outside the call that are not pruned (over, or waiting) count in n with no
prediction, so `min_group_size` counts a group's unpruned games or episodes (never fewer
trajectories, since each has at least one). A pruned unit stops whole: the game is cut ("pruned")
and every one of its seats' trajectories leaves the loss (in self-play both seats; the head scored
the seat to move); an agent episode's session is finished, so its agent's next call is refused, and
all its pieces leave the loss. Like a pruned row, neither is scored nor trains the head, and both
are counted in `prune/*` (per trajectory).

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

from reinforge.engines.decode_hook import DecodeCheck, RowGroups
from reinforge.learner.success_head_learner import SuccessHeadLearner, check_interval
from reinforge.models.prefix_logits import prefix_logits
from reinforge.models.success_head import prefix_features
from reinforge.rollout.pruned_sampling import PrefixCheck
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


def predict_success(learner: SuccessHeadLearner, logits: torch.Tensor, logprob_sum: torch.Tensor, logprob_min: torch.Tensor, count: torch.Tensor) -> list[float]:
    """p(success) of N live prefixes of responses (count: tokens each has sampled), by the head."""
    features = prefix_features(logits, logprob_sum, logprob_min, count, learner.budget, torch.zeros(len(count), dtype=torch.bool))
    return learner.head.probability(features).tolist()


def prune_groups(groups: list, predicted: list[float], settled: dict, choose) -> list[bool]:
    """The group accounting both paths share: live row i (predicted[i]) belongs to groups[i];
    settled[g] holds the predictions (None: never checked) of g's members that finished unpruned;
    `choose(live, done)` is `prune_choice` with the run's settings. -> which live rows to stop."""
    by_group: dict = {}
    for position, group in enumerate(groups):
        by_group.setdefault(group, []).append(position)
    stop = [False] * len(groups)
    for group, positions in by_group.items():
        for i in choose([predicted[i] for i in positions], settled.get(group, [])):
            stop[positions[i]] = True
    return stop


class PruningHook:
    """The pruning checks of one collection: a decode hook for one `rollout_groups` call of the
    TorchEngine (rows r, r+1, ... of a group are consecutive, `group_size` at a time,
    reinforge.rollout.episodes), and `check_prefixes` for chunked sampling on any engine
    (reinforge.rollout.pruned_sampling), which needs `model`: the in-process policy with the weights
    that sample (its logits at a prefix are the head's input). A game or the gateway asks `for_rows`
    for the hook of each of its generate calls instead (the module docstring: units)."""

    def __init__(self, learner: SuccessHeadLearner, group_size: int, model=None, rows: RowGroups | None = None):
        cfg = learner.cfg
        self.learner, self.group_size, self.rows = learner, group_size, rows
        self.every = check_interval(cfg.check_every, learner.budget)
        self.min_group_size, self.target_ratio, self.fail_below = cfg.min_group_size, cfg.target_ratio, cfg.fail_below
        self.model = model
        self._last: dict[int, float] = {}  # row -> its latest prediction
        self._step = 0
        self._member_last: dict = {}  # chunked sampling: group member -> its latest prediction

    def _choose(self, live: list[float], done: list[float | None]) -> list[int]:
        return prune_choice(live, done, self.min_group_size, self.target_ratio, self.fail_below)

    def for_rows(self, rows: RowGroups) -> PruningHook:
        """The hook of one generate call whose rows belong where `rows` says."""
        return PruningHook(self.learner, self.group_size, self.model, rows)

    def __call__(self, check: DecodeCheck) -> torch.Tensor:
        if check.step <= self._step:  # a new generate call (another turn or round): forget the last one
            self._last = {}
        self._step = check.step
        logprobs = check.logprobs.float().cpu()  # the head lives on the CPU; [L, V] logits are small
        count = torch.full((len(check.rows),), check.step)
        predicted = predict_success(self.learner, check.logits.cpu(), logprobs.sum(1), logprobs.min(1).values, count)
        rows = check.rows.cpu().tolist()
        self._last.update(zip(rows, predicted))
        finished, pruned = check.finished.cpu(), check.pruned.cpu()
        if self.rows is not None:
            return self._stop_units(rows, predicted, pruned)
        groups = [row // self.group_size for row in rows]
        settled = {
            g: [self._last.get(r) for r in range(g * self.group_size, (g + 1) * self.group_size) if finished[r] and not pruned[r]]
            for g in set(groups)
        }
        return torch.tensor(prune_groups(groups, predicted, settled, self._choose), dtype=torch.bool)

    def _stop_units(self, live_rows: list[int], predicted: list[float], pruned: torch.Tensor) -> torch.Tensor:
        """The same choice over units (games, agent episodes): a unit's prediction is the mean over
        its live rows in the call; a unit with a live row may be pruned (all its live rows stop), one
        whose rows all finished counts with its last prediction, and the group's units elsewhere
        (`rows.elsewhere`) with none."""
        groups, units = self.rows.groups, self.rows.units
        live_of: dict[object, list[int]] = {}  # unit -> positions of its live rows
        for position, row in enumerate(live_rows):
            live_of.setdefault(units[row], []).append(position)
        rows_of: dict[object, list[int]] = {}
        for row, unit in enumerate(units):
            rows_of.setdefault(unit, []).append(row)
        settled: dict[int, list[float | None]] = {g: [None] * n for g, n in self.rows.elsewhere.items()}
        for unit, rows in rows_of.items():
            if unit not in live_of and not any(pruned[r] for r in rows):
                settled.setdefault(groups[rows[0]], []).append(mean_or_none([self._last.get(r) for r in rows]))
        live = list(live_of)
        live_p = [sum(predicted[i] for i in live_of[u]) / len(live_of[u]) for u in live]
        stop = torch.zeros(len(live_rows), dtype=torch.bool)
        for unit, stopped in zip(live, prune_groups([groups[rows_of[u][0]] for u in live], live_p, settled, self._choose)):
            if stopped:
                stop[live_of[unit]] = True
        return stop

    def check_prefixes(self, check: PrefixCheck) -> list[bool]:
        """The same decision on prefixes sampled by any engine: the head reads the policy's logits
        after each row's context (one forward of `model`) and the log-probs of its turn so far."""
        if self.model is None:
            raise ValueError("PruningHook.check_prefixes needs the in-process policy model (PruningHook(..., model=...))")
        logits = prefix_logits(self.model, check.contexts)
        count = torch.tensor([len(lp) for lp in check.logprobs])
        sums = torch.tensor([sum(lp) for lp in check.logprobs], dtype=torch.float32)
        mins = torch.tensor([min(lp) for lp in check.logprobs], dtype=torch.float32)
        predicted = predict_success(self.learner, logits, sums, mins, count)
        self._member_last.update(zip(check.members, predicted))
        settled = {g: [self._member_last.get(m) for m in done] for g, done in check.settled.items()}
        return prune_groups([m[0] for m in check.members], predicted, settled, self._choose)



def mean_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None

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
