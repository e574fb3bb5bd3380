"""Partial rollouts of multi-turn episodes: an episode may stop mid-turn or between turns and resume later.

The single-turn round (`reinforge.rollout.partial.sample_round`) is one engine call. A multi-turn
episode needs the env between its turns, so a round here is several calls, all with the same
weights: each call advances every unfinished episode's current turn (a turn cut short earlier
resumes from its tokens, with what is left of its `max_new_tokens`), stops by the same
`GroupQuota` rule (a row whose turn finishes counts as a finished episode, the most the env could
make of it), and the turns that finished go to their episodes' envs, as in the rollout loop
(`reinforge.rollout.episodes`). The round ends as soon as `need` groups are really complete and
every must-finish group is; every call finishes at least one turn, so it ends. An episode still
running then keeps its env state and transcript: one aborted mid-turn resumes the turn from its
tokens next round, one between turns starts its next turn there, both with the newer weights.
Every sampled token keeps the policy version that produced it (`token_versions`).

A checkpoint holds the in-flight episodes without their env objects (a tool env's holds the
tokenizer and the tool registry): each keeps the turns it sent its env, and a resumed run
rebuilds the env state by replaying them (`rebuild_env`), exact for envs whose state follows
from the turns they were sent (the built-in tool and text-game envs).
"""

from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from reinforge.engines.base import Engine, Generation, SamplingParams
from reinforge.envs.base import Env
from reinforge.rollout.episodes import RunningEpisode, env_step, end_turn, turn_seed
from reinforge.rollout.partial import PartialEpisode, PartialGroup, RoundStats, continue_turns
from reinforge.rollout.pruned_sampling import PrefixPruner
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


@dataclass
class TurnEpisode:
    """One multi-turn episode in progress: the episode so far, the current turn's tokens so far."""

    running: RunningEpisode
    versions: list[int]  # policy version of each token of running.token_ids (-1: prompt / observation)
    turn: PartialEpisode = field(default_factory=PartialEpisode)  # the current turn, until it finishes
    sent: list[tuple[str, str]] = field(default_factory=list)  # (turn text, finish reason) the env was sent
    rounds: int = 0  # rounds it took part in; > 1 means it spanned steps

    @property
    def done(self) -> bool:
        return self.running.finish_reason is not None

    @property
    def finish_reason(self) -> str | None:
        return self.running.finish_reason

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["running"] = copy.copy(self.running)
        state["running"].env = None  # live objects; `rebuild_env` replays `sent` on resume
        return state


def start_group(env: Env, task: Task, key: int, group_size: int) -> PartialGroup:
    episodes = []
    for _ in range(group_size):
        episode_env = env.episode()
        prompt = list(episode_env.reset(task))
        running = RunningEpisode(episode_env, task, 0, prompt, len(prompt))
        episodes.append(TurnEpisode(running, [-1] * len(prompt)))
    return PartialGroup(task, key, list(episodes[0].running.token_ids), episodes)


def rebuild_env(env: Env, episode: TurnEpisode) -> None:
    """A fresh env episode brought to where the checkpointed one was, by replaying its turns."""
    episode_env = env.episode()
    episode_env.reset(episode.running.task)
    for text, finish_reason in episode.sent:
        try:
            episode_env.step(text, finish_reason)
        except Exception:  # it failed the same way the first time, and the episode recorded it
            pass
    episode.running.env = episode_env


def quota_met(groups: list[PartialGroup], need: int, must_finish: list[bool]) -> bool:
    complete = [g.complete for g in groups]
    return sum(complete) >= need and all(c for c, must in zip(complete, must_finish) if must)


def whole_turn(turn: PartialEpisode) -> Generation:
    """A finished turn as one generation, as if sampled in one call: its oldest token's version."""
    return Generation(turn.token_ids, turn.logprobs, turn.finish_reason, min(turn.versions, default=0), turn.errors)


def sample_turns(
    engine: Engine,
    env: Env,
    groups: list[PartialGroup],
    params: SamplingParams,
    seed: int | None,
    weights_index: int,
    need: int,
    must_finish: list[bool],
    max_episode_tokens: int | None,
    env_workers: int,
    pruner: PrefixPruner | None = None,
) -> RoundStats:
    """Advance the multi-turn episodes of `groups` (of `TurnEpisode`s) in place until `need` groups
    are complete and every must-finish group is (module docstring). With a `pruner` (rollout
    pruning) each call is sampled in chunks checked by it (reinforge.rollout.pruned_sampling): the
    head reads the current turn's prefix (its tokens of earlier rounds included) after the whole
    episode so far, and an episode whose turn it stops ends there ("pruned", the env not stepped)."""
    for group in groups:
        if group.start_index is None and not group.complete:
            group.start_index = weights_index
    taking_part: set[int] = set()  # episodes in an engine call of this round (a round may need none)
    rows_sent = resumed = aborted = 0
    call = 0
    with ThreadPoolExecutor(max_workers=env_workers) as pool:
        while not quota_met(groups, need, must_finish):
            rows = [(g, e) for g, group in enumerate(groups) for e in group.episodes if not e.done]
            if not rows:  # fewer groups than `need`: the caller's bug, but no reason to loop
                break
            done, cut = continue_turns(
                engine, [(g, e.running.token_ids, e.turn) for g, e in rows], groups, params, turn_seed(seed, call), need, must_finish,
                pruner,
            )
            call += 1
            rows_sent += len(rows)
            taking_part.update(id(e) for _, e in rows)
            resumed += sum(e.rounds > 0 and call == 1 for _, e in rows)
            aborted += cut
            finished = [rows[i][1] for i in done]
            whole = [whole_turn(e.turn) for e in finished]
            texts = [env.decode_response(g.token_ids) for g in whole]
            starts = [len(e.running.token_ids) for e in finished]
            fits = [e.running.add_turn(g, text, max_episode_tokens) for e, g, text in zip(finished, whole, texts)]
            results = list(pool.map(env_step, [e.running for e in finished], whole, texts))
            for episode, result, fit, text, start in zip(finished, results, fits, texts, starts):
                episode.versions += episode.turn.versions[: len(episode.running.token_ids) - start]
                if episode.turn.finish_reason != "pruned":  # a pruned turn never reached the env: nothing to replay
                    episode.sent.append((text, episode.turn.finish_reason))
                episode.turn = PartialEpisode()
                before = len(episode.running.token_ids)
                end_turn(episode.running, result, fit, len(episode.running.turn_spans) - 1, env.max_turns, max_episode_tokens)
                episode.versions += [-1] * (len(episode.running.token_ids) - before)  # the observation, if any
    for group in groups:
        for episode in group.episodes:
            if id(episode) in taking_part:
                episode.rounds += 1
    return RoundStats(rows_sent, resumed, aborted)


def turn_group_trajectories(group: PartialGroup, group_id: int) -> list[Trajectory]:
    """The complete group's episodes as trajectories, each token tagged with its policy version."""
    if not group.complete:
        raise ValueError(f"group of task {group.task.id} is not complete")
    out = []
    for episode in group.episodes:
        episode.running.group_id = group_id
        trajectory = episode.running.trajectory()
        trajectory.token_versions = list(episode.versions)
        out.append(trajectory)
    return out


class MultiTurnRounds:
    """Multi-turn episodes the rollout loop drives turn by turn: a round is `sample_turns`."""

    def __init__(self, env: Env, max_episode_tokens: int | None, env_workers: int):
        self.env, self.max_episode_tokens, self.env_workers = env, max_episode_tokens, env_workers

    def start_group(self, task: Task, key: int, group_size: int, engine: Engine) -> PartialGroup:
        return start_group(self.env, task, key, group_size)

    def sample(self, engine, groups, params, seed, weights_index, need, must_finish, pruner=None) -> RoundStats:
        return sample_turns(
            engine, self.env, groups, params, seed, weights_index, need, must_finish, self.max_episode_tokens, self.env_workers,
            pruner,
        )

    def trajectories(self, group: PartialGroup, group_id: int) -> list[Trajectory]:
        return turn_group_trajectories(group, group_id)

    def restore(self, group: PartialGroup) -> None:
        for episode in group.episodes:
            rebuild_env(self.env, episode)
