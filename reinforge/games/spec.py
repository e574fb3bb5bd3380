"""What `task.params` says for `task.source: game`: the game, who sits where, the match rules.

    task:
      source: game
      params:
        game: tictactoe                      # tictactoe | connect_four | kuhn_poker
        train_seats: [[policy, policy]]      # per training game, who plays each seat (default: self-play)
        eval_opponents: [random, minimax]    # the policy plays each, in every seat, at every evaluation
        eval_games: 20                       # games per opponent and seat
        draw_reward: 0.0
        max_illegal_moves: 2
        policies: [policy]                   # trainable policies (one shared policy for now)
        opponent_pool: {every: 10, size: 4, sample: pfsp}   # frozen past policies for `pool` seats (reinforge.games.pool)
        ratings: true                        # OpenSkill ratings of the policy at each evaluation (reinforge.games.ratings)

A seat names a trainable policy from `policies` or a fixed player (reinforge.games.opponents).
Checked before any compute: unknown game or player, an opponent that cannot play the game, more
trainable policies than the game has players.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reinforge.games.game import Game
from reinforge.games.opponents import OPPONENTS, check_opponent
from reinforge.games.play import POLICY
from reinforge.games.pool import POOL, OpponentPoolSpec
from reinforge.games.registry import get_game


class GameSpecError(ValueError):
    pass


class GameSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    game: str = Field(description="tictactoe | connect_four | kuhn_poker | rock_paper_scissors")
    train_seats: list[list[str]] | None = Field(None, description="Per training game, the player of each seat; default: the policy in every seat (self-play).")
    eval_opponents: list[str] | None = Field(None, description="Fixed players the policy meets at every evaluation; default: random, and the game's perfect / equilibrium player.")
    eval_games: int = Field(20, gt=0, description="Evaluation games per opponent and seat.")
    draw_reward: float = Field(0.0, description="Reward of each player for a draw (and for a game cut before its end).")
    max_illegal_moves: int = Field(2, gt=0, description="A player's n-th illegal move ends the game as its loss.")
    policies: list[str] = Field(default_factory=lambda: [POLICY], description="Trainable policies (seat names); one shared policy for now.")
    opponent_pool: OpponentPoolSpec | None = Field(None, description="Frozen past policies as opponents: a `pool` seat in train_seats is played by a snapshot drawn from this pool (docs/games.md).")
    ratings: bool = Field(True, description="Rate the policy at every evaluation (OpenSkill, against the fixed opponents as anchors); needs the openskill package (pip install 'reinforge[games]').")

    def seats(self, game: Game) -> list[list[str]]:
        return self.train_seats or [[POLICY] * game.num_players]

    def opponents(self, game: Game) -> list[str]:
        if self.eval_opponents is not None:
            return self.eval_opponents
        perfect = {"tictactoe": "minimax", "kuhn_poker": "kuhn_equilibrium"}.get(game.name)
        return ["random"] + ([perfect] if perfect else [])


def parse_spec(params: dict) -> tuple[GameSpec, Game]:
    """The checked spec and its game; every error names its `task.params` key."""
    try:
        spec = GameSpec.model_validate(params)
    except ValidationError as err:
        lines = [f"task.params.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()]
        raise GameSpecError("; ".join(lines) + " (task.source=game; docs/games.md)") from None
    try:
        game = get_game(spec.game)
    except ValueError as err:
        raise GameSpecError(f"task.params.game: {err}") from None
    if len(spec.policies) > game.num_players:
        raise GameSpecError(
            f"task.params.policies: {len(spec.policies)} trainable policies but {game.name} has {game.num_players} players"
        )
    if len(spec.policies) != 1 or len(set(spec.policies)) != len(spec.policies):
        raise GameSpecError(
            f"task.params.policies={spec.policies}: one shared trainable policy is supported for now (several distinct "
            "trainable policies in one run are not built yet, issue 16)"
        )
    for i, seats in enumerate(spec.seats(game)):
        where = f"task.params.train_seats[{i}]"
        if len(seats) != game.num_players:
            raise GameSpecError(f"{where}={seats}: {game.name} has {game.num_players} seats ({', '.join(game.roles)})")
        if not any(who in spec.policies for who in seats):
            raise GameSpecError(f"{where}={seats}: no trainable policy plays in it (name one of {spec.policies})")
        for who in seats:
            if who == POOL:
                if spec.opponent_pool is None:
                    raise GameSpecError(f"{where}={seats}: a `pool` seat needs task.params.opponent_pool (every, size, sample)")
            elif who not in spec.policies:
                _check_player(who, game, where)
    if spec.opponent_pool is not None and not any(POOL in seats for seats in spec.seats(game)):
        raise GameSpecError(
            "task.params.opponent_pool is set but no game of task.params.train_seats has a `pool` seat: name `pool` "
            "in a seat (e.g. [[policy, pool], [pool, policy]]) or drop opponent_pool"
        )
    for who in spec.opponents(game):
        if who == POOL:
            raise GameSpecError("task.params.eval_opponents: `pool` plays in training games only; evaluation meets fixed players")
        if who in spec.policies:
            raise GameSpecError(f"task.params.eval_opponents: {who!r} is a trainable policy; name fixed players ({', '.join(OPPONENTS)})")
        _check_player(who, game, "task.params.eval_opponents")
    return spec, game


def _check_player(who: str, game: Game, where: str) -> None:
    try:
        check_opponent(who, game)
    except ValueError as err:
        raise GameSpecError(f"{where}: {err}") from None
