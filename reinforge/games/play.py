"""Playing many games at once: one batched engine call per round of the policy's moves.

Each game is a `Match` (the referee) with a player in every seat: a trained policy ("policy", or
each of several distinct policies by its name), or a fixed opponent (reinforge.games.opponents)
that answers at once, without the engine. Every round, each live game's player to move (a policy
seat, once the fixed players have answered) is asked in one `generate` call of its policy's engine
(one call per policy per round); each sampled turn goes back to its game as that player's move.

Each policy seat keeps its own token stream, which becomes its own Trajectory (invariant 1): its
first message is tokenized as a chat prompt, every later one as an observation appended after its
previous turn (reinforge.envs.chat_format), and the sampled ids stay as the engine sampled them
(loss mask on, behaviour log-probs kept). A seat sees only its own messages, so a self-play game
yields one trajectory per seat, neither holding the other's hidden information.

Frozen players (pool members, reinforge.games.pool) are asked like the policy, each member in one
call of its own engine per round: they keep token streams of their own, which never become
trajectories (nothing of theirs is trained).

Rollout pruning (`decode_hook`, reinforge.values.rollout_pruning): each policy's generate call gets
the hook of its policy (one per policy, or one shared by a single policy) told which task group each
row's game is in (reinforge.engines.decode_hook.RowGroups: the unit is the game). A move the hook
stops ends its game ("pruned"): every seat's trajectory of it leaves the loss, like a pruned row.

Limits: a turn that would overflow the seat's `max_episode_tokens` is cut to fit and ends the
game ("max_tokens"), as does an observation with no room left for a reply.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from reinforge.engines.base import Engine, Generation, SamplingParams
from reinforge.engines.decode_hook import GroupedDecodeHook, RowGroups
from reinforge.envs.chat_format import ChatFormat
from reinforge.games.match import Match
from reinforge.games.opponents import OPPONENTS
from reinforge.games.pool import MEMBER_PREFIX
from reinforge.games.pool import is_member as is_pool_member
from reinforge.rollout.episodes import add_sampled_turn, turn_seed
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

POLICY = "policy"
PRUNED = "pruned"  # the finish reason of a game rollout pruning stopped (and of its seats' trajectories)
T = TypeVar("T")




@dataclass
class SeatStream:
    """One policy seat's tokens so far: messages appended, turns sampled."""

    role: str
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    transcript: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    prompt_length: int = 0
    policy_version: int | None = None
    last_text: str = ""

    def observe(self, ids: list[int], text: str) -> None:
        if not self.token_ids:
            self.prompt_length = len(ids)
        self.token_ids += ids
        self.loss_mask += [False] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.transcript.append({"role": "env", "text": text})

    def add_turn(self, generation: Generation, text: str, budget: int | None) -> bool:
        """Append the sampled turn; False when the seat's token budget cut it."""
        return add_sampled_turn(self, generation, text, budget)


@dataclass
class GameRun:
    """One game of a rollout: its task, group, players, referee, and the policy seats' streams."""

    task: Task
    group_id: int
    players: list[str]  # per seat: a trainable policy's name, a frozen pool member ("pool@<step>") or a fixed opponent
    match: Match
    rng: random.Random  # the fixed opponents' randomness
    streams: dict[int, SeatStream] = field(default_factory=dict)  # the seats a model plays: trainable and frozen
    policies: tuple[str, ...] = (POLICY,)  # the trainable players' names

    def __post_init__(self) -> None:
        roles = self.match.game.roles
        self.streams = {seat: SeatStream(roles[seat]) for seat, who in enumerate(self.players) if self.plays_by_model(who)}

    def plays_by_model(self, who: str) -> bool:
        """A trainable policy, or a frozen pool member (reinforge.games.pool): both sampled by an engine."""
        return who in self.policies or is_pool_member(who)

    def answer_fixed_players(self) -> None:
        """Let the fixed opponents move until a model's seat is to move or the game is over."""
        while not self.match.over and not self.plays_by_model(self.players[self.match.to_move]):
            seat = self.match.to_move
            self.match.submit(seat, OPPONENTS[self.players[seat]](self.match.game, self.match.state, seat, self.rng))

    def ask_to_move(self, chat: ChatFormat, max_episode_tokens: int | None) -> int | None:
        """Show the seat to move its message (appended to its stream); returns how many tokens it
        took, or None when there was no room left for it and a reply (the game is cut)."""
        seat = self.match.to_move
        stream, text = self.streams[seat], self.match.message(seat)
        message = [{"role": "user", "content": text}]
        ids = chat.observation_ids(message) if stream.token_ids else chat.prompt_ids(message)
        if max_episode_tokens is not None and len(stream.token_ids) + len(ids) >= max_episode_tokens:
            self.match.cut("max_tokens")  # no room left for this message and a reply
            return None
        stream.observe(ids, text)
        return len(ids)

    def take_turn(self, seat: int, generation: Generation, text: str, max_episode_tokens: int | None) -> int:
        """The seat's sampled turn goes to its stream and, as its move, to the referee; the fixed
        players answer. Returns how many of the turn's tokens the stream kept (a cut turn keeps fewer)."""
        stream = self.streams[seat]
        before = len(stream.token_ids)
        fits = stream.add_turn(generation, text, max_episode_tokens)
        if generation.finish_reason == PRUNED:  # the game leaves the loss: no move, no result
            self.match.cut(PRUNED)
            return len(stream.token_ids) - before
        self.match.submit(seat, text)
        if not fits:
            self.match.cut("max_tokens")
        self.answer_fixed_players()
        return len(stream.token_ids) - before

    def trajectories(self, chat: ChatFormat, version: int | Mapping[str, int]) -> list[Trajectory]:
        """One per policy seat, in seat order; a seat that never got to move (the other player
        forfeited first) holds just its first message, with nothing to train, and is marked as
        of `version` (the rollout's policy version; several policies: name -> its own)."""
        rewards, out = self.match.rewards(), []
        for seat, stream in self.streams.items():
            if self.players[seat] not in self.policies:  # a frozen player: not trained
                continue
            if not stream.token_ids:
                text = self.match.message(seat)
                stream.observe(chat.prompt_ids([{"role": "user", "content": text}]), text)
            outcome = self.match.outcome(seat)
            out.append(
                Trajectory(
                    task_id=self.task.id,
                    group_id=self.group_id,
                    token_ids=stream.token_ids,
                    loss_mask=stream.loss_mask,
                    behaviour_logprobs=stream.logprobs,
                    turn_spans=stream.turn_spans,
                    prompt_length=stream.prompt_length,
                    response_text=stream.last_text,
                    policy_version=stream.policy_version if stream.policy_version is not None
                    else version[self.players[seat]] if isinstance(version, Mapping) else version,
                    finish_reason=self.match.finish_reason or "error",
                    errors=stream.errors,
                    transcript=stream.transcript,
                    stats={
                        "env_reward": rewards[seat],
                        "illegal_moves": float(self.match.illegal[seat]),
                        "game_moves": float(self.match.moves),
                        **{name: float(outcome == name) for name in ("win", "draw", "loss")},
                    },
                    agent=stream.role,
                )
            )
        return out

    def record(self) -> dict:
        """The game move by move, for people: who played what, and each policy seat's own view."""
        roles = self.match.game.roles
        return {
            "players": {roles[s]: who for s, who in enumerate(self.players)},
            "moves": [{"role": roles[m["player"]], "text": m["text"], "legal": m["legal"]} for m in self.match.log],
            "finish_reason": self.match.finish_reason,
            "rewards": dict(zip(roles, self.match.rewards())),
            "views": {stream.role: stream.transcript for seat, stream in self.streams.items() if self.players[seat] in self.policies},
        }


def player_seed(seed: int | None, who: str, policy_index: int) -> int | None:
    """The round's sampling seed for `who`: the first trainable policy keeps the round's seed (one
    shared policy samples as before), the other policies get streams of their own (`policy_index`),
    and a pool member's stream depends on its step."""
    if seed is None:
        return None
    if is_pool_member(who):
        return seed + 7919 * (1 + int(who.removeprefix(MEMBER_PREFIX)))
    return seed if policy_index == 0 else seed + 7919 * policy_index


def game_rows(runs: list[GameRun], asked: list[GameRun]) -> RowGroups:
    """The rows of one generate call (one per game in `asked`) for rollout pruning: each game's task
    group, the game as the unit, and per group its other games not pruned (over or not asked now)."""
    in_call = {id(run) for run in asked}
    elsewhere: dict[int, int] = {}
    for run in runs:
        if id(run) not in in_call and run.match.finish_reason != PRUNED:
            elsewhere[run.group_id] = elsewhere.get(run.group_id, 0) + 1
    return RowGroups([run.group_id for run in asked], [id(run) for run in asked], elsewhere)


def calls_by_player(
    asking: list[tuple[str, T]], engine: Engine | Mapping[str, Engine], frozen: Mapping[str, Engine] | None,
) -> list[tuple[str, Engine, int, list[T]]]:
    """The round's engine calls, from its rows (the player to move, the row): (player, its engine,
    its index among the trainable policies, its rows in order), the trainable policies first, in
    their order, then the frozen players."""
    engines = engine if isinstance(engine, Mapping) else None
    by_player: dict[str, list[T]] = {}
    for who, row in asking:
        by_player.setdefault(who, []).append(row)
    policy_order = list(engines) if engines is not None else [POLICY]
    out = []
    for who, rows in sorted(by_player.items(), key=lambda item: is_pool_member(item[0])):
        index = policy_order.index(who) if who in policy_order else 0
        if is_pool_member(who):
            sampler = (frozen or {}).get(who)
            if sampler is None:
                raise RuntimeError(f"no engine for the frozen player {who!r} (play_games(frozen=...))")
        else:
            sampler = engines[who] if engines is not None else engine
        out.append((who, sampler, index, rows))
    return out


def play_games(
    engine: Engine | Mapping[str, Engine],
    chat: ChatFormat,
    decode,
    runs: list[GameRun],
    params: SamplingParams,
    seed: int | None,
    max_episode_tokens: int | None = None,
    frozen: Mapping[str, Engine] | None = None,
    decode_hook: GroupedDecodeHook | Mapping[str, GroupedDecodeHook] | None = None,
) -> int:
    """Play every game of `runs` to its end (or cut), in place; returns the oldest policy version
    that sampled any turn (the engine's version when no policy seat had to move). `engine` samples
    every policy seat, or, as a mapping, each trainable policy's seats are sampled by that policy's
    engine; `frozen` maps each frozen player (pool member) seated in `runs` to its engine.
    `decode_hook` (rollout pruning): the trainable policies' hook, or each policy's by name."""
    versions: list[int] = []
    for run in runs:
        run.answer_fixed_players()
    live = [run for run in runs if not run.match.over]
    round_ = 0
    while live:
        asking = [(run, run.match.to_move) for run in live if run.ask_to_move(chat, max_episode_tokens) is not None]
        for who, sampler, index, calls in calls_by_player([(run.players[seat], (run, seat)) for run, seat in asking], engine, frozen):
            hook = {}
            if decode_hook is not None and not is_pool_member(who):
                own = decode_hook.get(who) if isinstance(decode_hook, Mapping) else decode_hook
                if own is not None and getattr(sampler, "supports_decode_hook", False):
                    hook = {"decode_hook": own.for_rows(game_rows(runs, [run for run, _ in calls]))}
            generations = sampler.generate(
                [list(run.streams[seat].token_ids) for run, seat in calls], params,
                seed=player_seed(turn_seed(seed, round_), who, index), **hook,
            )
            if not is_pool_member(who):
                versions += [g.policy_version for g in generations]
            for (run, seat), generation in zip(calls, generations):
                run.take_turn(seat, generation, decode(generation.token_ids), max_episode_tokens)
        round_ += 1
        live = [run for run in live if not run.match.over]
    # No policy turn sampled (a frozen player forfeited first): the engine's current version.
    return min(versions, default=getattr(engine, "policy_version", 0))
