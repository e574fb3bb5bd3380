"""Partial rollouts: episodes that can stop mid-response and resume later with newer weights.

APRIL (Zhou et al. 2025, "APRIL: Active Partial Rollouts in Reinforcement Learning to Tame
Long-tail Generation"): a batch of responses takes as long as its longest one, and with long-tail
lengths most rows sit finished while a few keep the engine busy. So a step starts more groups
than it trains on, stops sampling as soon as enough groups are complete, and keeps the unfinished
rows: a later round feeds each one back to the engine as prompt + the tokens sampled so far, with
what is left of its token budget. Every sampled token keeps the behaviour log-prob and the policy
version that produced it, which is exactly what the decoupled-PPO correction (`algo.tis_cap`)
needs; the trajectory's `policy_version` is its oldest token's.

This module holds one round of sampling (`sample_round`) and the types it works on; which groups
are started, which must finish and which are trained is the trainer's choice
(`reinforge.trainer.partial_collect`). The round's stop rule is a `GroupQuota`, which Ray
rollout workers split into one rule per worker over whole groups. Multi-turn episodes, whose env
state is carried across rounds too, are `reinforge.rollout.partial_turns`; games, whose seats take
turns, `reinforge.games.partial_play`. Each kind is a `PartialRounds`: how its groups start, how
a round advances them, and what trajectories a complete group gives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.base import Env, StepResult
from reinforge.rollout.pruned_sampling import PrefixPruner, generate_pruned
from reinforge.rollout.trajectory import Trajectory, single_turn_trajectory
from reinforge.tasks.task import Task


@dataclass
class PartialEpisode:
    """One response in progress: what was sampled so far, token by token, and by which version."""

    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # policy version of each sampled token
    finish_reason: str | None = None  # None while unfinished
    errors: list[str] = field(default_factory=list)
    rounds: int = 0  # engine calls it took part in; > 1 means it was resumed

    @property
    def done(self) -> bool:
        return self.finish_reason is not None


@dataclass
class PartialGroup:
    """The `group_size` episodes of one task; they start in the same round, with the same weights."""

    task: Task
    key: int  # creation order over the run: ties in "oldest first"
    prompt_ids: list[int]
    episodes: list[PartialEpisode]
    start_index: int | None = None  # weight publication (RL step) that sampled its first tokens

    @property
    def complete(self) -> bool:
        return all(e.done for e in self.episodes)


@dataclass
class GroupQuota:
    """A round's stop rule (the engine's `stop_when`): stop once `need` groups are complete and
    every must-finish group is. Called with the rows finished so far (bool [rows]); rows are
    ordered by group, so the rule splits into per-worker rules over whole groups (`split`)."""

    group_of_row: torch.Tensor  # long [rows]: index of each row's group
    done_before: torch.Tensor  # long [groups]: episodes of each group already done before the round
    sizes: torch.Tensor  # long [groups]
    must: torch.Tensor  # bool [groups]
    need: int

    def __call__(self, finished: torch.Tensor) -> bool:
        complete = self.done_before + torch.bincount(self.group_of_row[finished], minlength=len(self.sizes)) == self.sizes
        return int(complete.sum()) >= self.need and bool(complete[self.must].all())

    def split(self, workers: int) -> list[tuple[int, int, GroupQuota]]:
        """At most `workers` contiguous row ranges [start, end) of whole groups (group counts differing
        by at most one), each with its own rule: its must-finish groups, and a quota of complete
        groups. The quotas add up to what the round still needs (`need` minus the groups complete
        before it), spread as evenly as the group counts, so every worker stopping by its own rule
        leaves at least `need` groups complete and every must-finish group complete."""
        order = torch.unique_consecutive(self.group_of_row)  # groups with rows, in row order
        if not bool((order[1:] > order[:-1]).all()):
            raise ValueError("GroupQuota.split needs the rows ordered by group")
        already = int((self.done_before == self.sizes).sum())
        missing = max(0, self.need - already)  # <= len(order): every incomplete group has rows
        chunks = min(workers, len(order))
        base, extra = divmod(len(order), chunks)
        quota, quota_extra = divmod(missing, chunks)  # so quota i <= group count i
        parts, first, row = [], 0, 0
        for i in range(chunks):
            groups = order[first : first + base + (1 if i < extra else 0)]
            first += len(groups)
            rows = int(torch.isin(self.group_of_row, groups).sum())
            rule = GroupQuota(
                torch.searchsorted(groups, self.group_of_row[row : row + rows]), self.done_before[groups],
                self.sizes[groups], self.must[groups], quota + (1 if i < quota_extra else 0),
            )
            parts.append((row, row + rows, rule))
            row += rows
        return parts


def live_members(groups: list[PartialGroup]) -> list[tuple[int, int]]:
    """The members (group key, index) of the unfinished episodes, in the order a round sends them."""
    return [(group.key, j) for group in groups for j, e in enumerate(group.episodes) if not e.done]


def settled_members(groups: list[PartialGroup]) -> dict[int, list[tuple[int, int]]]:
    """Each group's members whose episodes finished unpruned (rollout pruning's accounting)."""
    return {
        group.key: [(group.key, j) for j, e in enumerate(group.episodes) if e.done and e.finish_reason != "pruned"] for group in groups
    }


@dataclass
class RoundStats:
    rows: int  # episodes sent to the engine
    resumed: int  # of those, episodes continued from an earlier round
    aborted: int  # episodes cut short this round (to be resumed)


def sample_round(
    engine: Engine,
    groups: list[PartialGroup],
    params: SamplingParams,
    seed: int | None,
    weights_index: int,
    need: int,
    must_finish: list[bool],
    pruner: PrefixPruner | None = None,
) -> RoundStats:
    """Advance every unfinished episode of `groups` in one batched engine call, in place.

    Sampling stops once `need` of `groups` are complete and every group flagged in `must_finish`
    is; a row still running then comes back "aborted" and stays unfinished. Each row asks for what
    is left of its budget (`params.max_new_tokens` minus what it already holds). With a `pruner`
    (rollout pruning) the call is sampled in chunks checked by it (reinforge.rollout.pruned_sampling):
    a pruned episode is done ("pruned") and counts towards its group's completion; the head reads
    the whole response so far, the tokens of earlier rounds included."""
    rows = [(g, e) for g, group in enumerate(groups) for e in group.episodes if not e.done]
    if not rows:
        return RoundStats(0, 0, 0)
    for group in groups:
        if group.start_index is None and not group.complete:
            group.start_index = weights_index
    resumed = sum(bool(e.token_ids) for _, e in rows)
    _, aborted = continue_turns(engine, [(g, groups[g].prompt_ids, e) for g, e in rows], groups, params, seed, need, must_finish, pruner)
    for _, episode in rows:
        episode.rounds += 1
    return RoundStats(len(rows), resumed, aborted)


def continue_turns(
    engine: Engine,
    rows: list[tuple[int, list[int], PartialEpisode]],
    groups: list[PartialGroup],
    params: SamplingParams,
    seed: int | None,
    need: int,
    must_finish: list[bool],
    pruner: PrefixPruner | None = None,
) -> tuple[list[int], int]:
    """One engine call that continues the current turn of each row (group index, the tokens before
    the turn, the turn so far), in place: a turn cut short earlier resumes from its tokens with
    what is left of its `max_new_tokens`. The call stops by the round's `GroupQuota` (a row whose
    turn finishes counts as a finished episode of its group, the most its env could make of it);
    returns the indices of the rows whose turn finished, and how many came back aborted. Shared by
    single-turn rounds (`sample_round`), multi-turn episodes (reinforge.rollout.partial_turns) and the
    games' seats (reinforge.games.partial_play). With a
    `pruner` the call is sampled in chunks checked by it (reinforge.rollout.pruned_sampling); a
    pruned turn finishes ("pruned")."""
    prompts = [before + turn.token_ids for _, before, turn in rows]
    budgets = [params.max_new_tokens - len(turn.token_ids) for _, _, turn in rows]
    stop_when = GroupQuota(
        group_of_row=torch.tensor([g for g, _, _ in rows]),
        done_before=torch.tensor([sum(e.done for e in group.episodes) for group in groups]),
        sizes=torch.tensor([len(group.episodes) for group in groups]),
        must=torch.tensor(must_finish, dtype=torch.bool),
        need=need,
    )
    if pruner is None:
        generations = engine.generate(prompts, params, seed=seed, budgets=budgets, stop_when=stop_when)
    else:
        generations = generate_pruned(
            engine, prompts, params, seed, pruner, live_members(groups), settled_members(groups), budgets,
            [turn.logprobs for _, _, turn in rows], stop_when,
        )
    finished, aborted = [], 0
    for i, ((_, _, turn), generation) in enumerate(zip(rows, generations)):
        turn.token_ids += generation.token_ids
        turn.logprobs += generation.logprobs
        turn.versions += [generation.policy_version] * len(generation.token_ids)
        turn.errors += generation.errors
        if generation.finish_reason == "aborted":
            aborted += 1
        else:
            turn.finish_reason = generation.finish_reason
            finished.append(i)
    return finished, aborted


class PartialRounds(Protocol):
    """One kind of episode under partial rollouts (single-turn, multi-turn, games)."""

    def start_group(self, task: Task, key: int, group_size: int, engine: Engine) -> PartialGroup:
        """A new group of `task`, nothing sampled yet (`engine`: the one its first round will use)."""
        ...

    def sample(
        self, engine, groups: list[PartialGroup], params: SamplingParams, seed: int | None, weights_index: int,
        need: int, must_finish: list[bool], pruner: PrefixPruner | None = None,
    ) -> RoundStats:
        """Advance `groups` in place until `need` are complete and every must-finish one is (or,
        for a one-call round, until the engine stops by that rule); `pruner`: rollout pruning's
        checks between chunks of sampling (reinforge.rollout.pruned_sampling), where the kind serves it."""
        ...

    def trajectories(self, group: PartialGroup, group_id: int) -> list[Trajectory]:
        """The complete group's trajectories, each token tagged with its policy version."""
        ...

    def restore(self, group: PartialGroup) -> None:
        """Bring a group loaded from a checkpoint back to life (live objects are not saved)."""
        ...


class SingleTurnRounds:
    """Single-turn episodes: a round is one engine call (`sample_round`)."""

    def __init__(self, env: Env):
        self.env = env

    def start_group(self, task: Task, key: int, group_size: int, engine: Engine) -> PartialGroup:
        prompt = self.env.episode().reset(task)
        return PartialGroup(task, key, list(prompt), [PartialEpisode() for _ in range(group_size)])

    def sample(self, engine, groups, params, seed, weights_index, need, must_finish, pruner=None) -> RoundStats:
        return sample_round(engine, groups, params, seed, weights_index, need, must_finish, pruner)

    def trajectories(self, group: PartialGroup, group_id: int) -> list[Trajectory]:
        return group_trajectories(self.env, group, group_id)

    def restore(self, group: PartialGroup) -> None:
        pass


def group_trajectories(env: Env, group: PartialGroup, group_id: int) -> list[Trajectory]:
    """The complete group's episodes as trajectories, through the env as the rollout loop does."""
    if not group.complete:
        raise ValueError(f"group of task {group.task.id} is not complete")
    out = []
    for episode in group.episodes:
        text = env.decode_response(episode.token_ids)
        if episode.finish_reason == "pruned":  # stopped by rollout pruning: not scored, the env is not asked
            result = StepResult(done=True, info={"finish_reason": "pruned"})
        else:
            try:
                episode_env = env.episode()
                episode_env.reset(group.task)
                result = episode_env.step(text, episode.finish_reason)
            except Exception as err:  # as in the rollout loop: recorded on the trajectory, the batch goes on
                result = StepResult(done=True, info={"finish_reason": "error", "error": f"env step: {type(err).__name__}: {err}"})
        errors = episode.errors + ([str(result.info["error"])] if "error" in result.info else [])
        trajectory = single_turn_trajectory(
            group.task.id, group.prompt_ids, episode.token_ids, episode.logprobs, text,
            finish_reason=result.info.get("finish_reason", episode.finish_reason), group_id=group_id,
            policy_version=min(episode.versions, default=0), errors=errors,
        )
        trajectory.token_versions = [-1] * len(group.prompt_ids) + list(episode.versions)
        out.append(trajectory)
    return out
