"""Partial rollouts of games: a game may stop between moves or mid-turn and resume next step.

A game's state between turns is data: the referee (`Match`: the game state, every player's inbox,
the illegal-move counts), the fixed players' RNG and each model seat's token stream (`GameRun`).
So a game in progress (`PausedGame`) is that run plus the turn of the seat to move, sampled so
far. A round advances every unfinished game as `play_games` does, one engine call per player
(each trainable policy's seats with its own engine, each frozen pool member's with its lane), with
the machinery of multi-turn partial rollouts (`reinforge.rollout.partial.continue_turns`):
each call continues the turns with what is left of their `max_new_tokens` and stops by the round's
`GroupQuota` (a seat's turn finishing counts as its game finishing, the most the game could make
of it); the finished turns go to their games as moves, the fixed players answer. The round ends as
soon as `need` groups have every game over and every must-finish group has. A game still going
then waits for the next round, between moves or with its seat's turn cut short ("aborted"), and
resumes with the newer weights: each token keeps the version that sampled it (`token_versions`),
the trajectory's `policy_version` is its oldest sampled token's, and `algo.tis_cap` corrects the
older ones. A frozen member's version is its snapshot's: nothing of it is trained.

Opponent pool: a game's pool seats are drawn when the game is set up, as in whole rollouts; a
member that leaves the pool while a paused game seats it stays retired until that game ends
(`OpponentPool.pin`), and the policy's result against it is recorded when the game ends.

Checkpoints: a paused game is data (its referee's state, RNG and streams pickle as they are; the
game's rules are left out and put back from the game registry), so it goes into the checkpoint
with the partial-rollout pool and resumes exactly.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reinforge.engines.base import Engine, SamplingParams
from reinforge.games.play import GameRun, calls_by_player, player_seed
from reinforge.games.pool import is_member
from reinforge.rollout.episodes import turn_seed
from reinforge.rollout.partial import PartialEpisode, PartialGroup, RoundStats, continue_turns
from reinforge.rollout.partial_turns import quota_met, whole_turn
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

if TYPE_CHECKING:  # the game env makes its GameRounds (GameEnv.partial_rounds)
    from reinforge.games.env import GameEnv


@dataclass
class PausedGame:
    """One game in progress: the run, and the turn of its seat to move sampled so far."""

    run: GameRun
    start_version: int  # the version of the engine that first asked a move of it (a seat that never moved is of it)
    turn: PartialEpisode = field(default_factory=PartialEpisode)
    asked: bool = False  # the seat to move was shown its message: its turn is under way
    versions: dict[int, list[int]] = field(default_factory=dict)  # per model seat: each token's version (-1: a message)
    rounds: int = 0  # rounds it took part in; > 1 means it spanned steps
    recorded: bool = False  # its result against the pool members it seats was recorded

    @property
    def done(self) -> bool:
        return self.run.match.over

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["run"] = copy.copy(self.run)
        state["run"].match = copy.copy(self.run.match)
        state["run"].match.game = None  # the rules, with caches of their own (minimax); `GameRounds.restore` puts them back
        return state


def engine_version(engine: Engine | Mapping[str, Engine]) -> int:
    engines = engine.values() if isinstance(engine, Mapping) else [engine]
    return min(getattr(e, "policy_version", 0) for e in engines)


class GameRounds:
    """Partial rollouts of `env`'s games (the `PartialRounds` of reinforge.rollout.partial)."""

    def __init__(self, env: GameEnv, max_episode_tokens: int | None):
        self.env, self.max_episode_tokens = env, max_episode_tokens

    def start_group(self, task: Task, key: int, group_size: int, engine: Engine | Mapping[str, Engine]) -> PartialGroup:
        """The group's games, set up (the pool seats drawn, the fixed players' first moves made)."""
        runs = self.env.new_group(task, key, group_size, f"partial-{key}", engine)
        version = engine_version(engine)
        games = []
        for run in runs:
            run.answer_fixed_players()
            games.append(PausedGame(run, version, versions={seat: [] for seat in run.streams}))
        return PartialGroup(task, key, [], games)

    def sample(
        self, engine: Engine | Mapping[str, Engine], groups: list[PartialGroup], params: SamplingParams, seed: int | None,
        weights_index: int, need: int, must_finish: list[bool], pruner=None,
    ) -> RoundStats:
        if pruner is not None:  # refused before compute (reinforge.values.capabilities: decode_loop_envs)
            raise ValueError("rollout pruning of games runs inside the TorchEngine's decode loop, not with partial rollouts")
        for group in groups:
            if group.start_index is None and not group.complete:
                group.start_index = weights_index
        taking_part: set[int] = set()  # games in an engine call of this round
        rows_sent = resumed = aborted = 0
        call = 0
        while not quota_met(groups, need, must_finish):
            asking = []
            for index, group in enumerate(groups):
                for game in group.episodes:
                    if not game.done and not game.asked:
                        shown = game.run.ask_to_move(self.env.chat, self.max_episode_tokens)
                        if shown is not None:
                            game.versions[game.run.match.to_move] += [-1] * shown
                            game.asked = True
                        else:  # cut: no room left for the message and a reply
                            self._ended(game)
                    if not game.done:
                        asking.append((game.run.players[game.run.match.to_move], (index, game)))
            if not asking:  # fewer groups than `need`: the caller's bug, but no reason to loop
                break
            frozen = {who: self.env.frozen_engine(who, engine) for who, _ in asking if is_member(who)}
            for who, sampler, policy_index, rows in calls_by_player(asking, engine, frozen):
                if quota_met(groups, need, must_finish):  # an earlier player's call finished the round
                    break
                seat_rows = [(g, game.run.streams[game.run.match.to_move].token_ids, game.turn) for g, game in rows]
                done, cut = continue_turns(
                    sampler, seat_rows, groups, params, player_seed(turn_seed(seed, call), who, policy_index), need, must_finish,
                )
                rows_sent += len(rows)
                taking_part.update(id(game) for _, game in rows)
                resumed += sum(game.rounds > 0 and call == 0 for _, game in rows)
                aborted += cut
                for i in done:
                    self._move(rows[i][1])
            call += 1
        for group in groups:
            for game in group.episodes:
                if id(game) in taking_part:
                    game.rounds += 1
        if self.env.pool is not None:  # the members the games still going seat stay until those end
            self.env.pool.pin({who for group in groups for g in group.episodes if not g.done for who in g.run.players if is_member(who)})
        return RoundStats(rows_sent, resumed, aborted)

    def _move(self, game: PausedGame) -> None:
        """The finished turn of the game's seat to move is its move."""
        seat, turn = game.run.match.to_move, game.turn
        kept = game.run.take_turn(seat, whole_turn(turn), self.env.decode_response(turn.token_ids), self.max_episode_tokens)
        game.versions[seat] += turn.versions[:kept]
        game.turn, game.asked = PartialEpisode(), False
        self._ended(game)

    def _ended(self, game: PausedGame) -> None:
        """A game that is over: the policy's result against the pool members it seats, once."""
        if game.done and not game.recorded and self.env.pool is not None:
            self.env.record_pool_result(game.run)
            game.recorded = True

    def trajectories(self, group: PartialGroup, group_id: int) -> list[Trajectory]:
        """Each game's policy seats in seat order, as `GameEnv.run_groups` gives them."""
        if not group.complete:
            raise ValueError(f"group of task {group.task.id} is not complete")
        out = []
        for game in group.episodes:
            run = game.run
            run.group_id = group_id
            seats = [seat for seat in run.streams if run.players[seat] in run.policies]
            for seat, trajectory in zip(seats, run.trajectories(self.env.chat, game.start_version), strict=True):
                versions = game.versions[seat]
                trajectory.token_versions = versions + [-1] * (len(trajectory.token_ids) - len(versions))  # a first message only
                out.append(trajectory)
        return out

    def restore(self, group: PartialGroup) -> None:
        """The rules back into each game loaded from a checkpoint (the rest is data); the frozen
        members' lane is made on its first call."""
        for game in group.episodes:
            game.run.match.game = self.env.game(group.task.metadata["game"])

