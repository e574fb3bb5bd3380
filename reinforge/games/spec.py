"""What `task.params` says for `task.source: game`: the game, who sits where, the match rules.

    task:
      source: game
      params:
        game: tictactoe                      # tictactoe | connect_four | kuhn_poker | describer_guesser
        train_seats: [[policy, policy]]      # per training game, who plays each seat (default: self-play)
        eval_opponents: [random, minimax]    # the policy plays each, in every seat, at every evaluation
        eval_games: 20                       # games per opponent and seat
        draw_reward: 0.0
        max_illegal_moves: 2
        opponent_pool: {every: 10, size: 4, sample: pfsp}   # frozen past policies for `pool` seats (reinforge.games.pool)
        ratings: true                        # OpenSkill ratings of the policy at each evaluation (reinforge.games.ratings)

A seat names a trainable policy of the run's top-level `policies:` section (default: one, `policy`)
or a fixed player (reinforge.games.opponents). Several distinct policies (`policies: {describer: {},
guesser: {model: path/to/hf_dir}}`) are each their own model, trained on the trajectories of the
seats it plays (reinforge.run.pipeline, reinforge.trainer.rl_loop). Checked before any
compute: unknown game or player, an opponent that cannot play the game, more trainable policies
than the game has players, a policy that plays no seat, a policy named like a fixed player.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reinforge.games.game import Game
from reinforge.games.opponents import OPPONENTS, check_opponent
from reinforge.games.play import POLICY
from reinforge.games.pool import POOL, OpponentPoolSpec
from reinforge.games.registry import get_game
from reinforge.config.policies_schema import MOVED_FROM_TASK_PARAMS


class GameSpecError(ValueError):
    pass


class GameSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    game: str = Field(description="tictactoe | connect_four | kuhn_poker | rock_paper_scissors | describer_guesser | textarena:<env id> (games.textarena_game)")
    train_seats: list[list[str]] | None = Field(None, description="Per training game, the player of each seat; default: the policy in every seat (self-play).")
    eval_opponents: list[str] | None = Field(None, description="Fixed players the policy meets at every evaluation; default: random, and the game's perfect / equilibrium player (describer_guesser: literal).")
    eval_games: int = Field(20, gt=0, description="Evaluation games per opponent and seat.")
    draw_reward: float = Field(0.0, description="Reward of each player for a draw (and for a game cut before its end).")
    max_illegal_moves: int = Field(2, gt=0, description="A player's n-th illegal move ends the game as its loss.")
    # Not a task.params key: the run's top-level `policies:` names, handed to parse_spec.
    policies: list[str] = Field(default_factory=lambda: [POLICY], exclude=True)
    opponent_pool: OpponentPoolSpec | None = Field(None, description="Frozen past policies as opponents: a `pool` seat in train_seats is played by a snapshot drawn from this pool (docs/games.md).")
    ratings: bool = Field(True, description="Rate the policy at every evaluation (OpenSkill, against the fixed opponents as anchors); needs the openskill package (pip install 'reinforge[games]').")

    @property
    def policy_names(self) -> list[str]:
        return list(self.policies)

    def seats(self, game: Game) -> list[list[str]]:
        if self.train_seats:
            return self.train_seats
        names = self.policy_names
        return [names] if len(names) == game.num_players else [[names[0]] * game.num_players]

    def opponents(self, game: Game) -> list[str]:
        if self.eval_opponents is not None:
            return self.eval_opponents
        if game.name == "describer_guesser":  # a random partner makes every game a 1-in-6 guess: it measures nothing
            return ["literal"]
        perfect = {"tictactoe": "minimax", "kuhn_poker": "kuhn_equilibrium"}.get(game.name)
        return ["random"] + ([perfect] if perfect else [])


def parse_spec(params: dict, policies: list[str] | None = None) -> tuple[GameSpec, Game]:
    """The checked spec and its game, the seats naming `policies` (the run's `policies:` section;
    default: one, `policy`); every error names its key."""
    if "policies" in params:
        raise GameSpecError(MOVED_FROM_TASK_PARAMS)
    try:
        spec = GameSpec.model_validate({**params, "policies": list(policies or [POLICY])})
    except ValidationError as err:
        lines = [f"task.params.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()]
        raise GameSpecError("; ".join(lines) + " (task.source=game; docs/games.md)") from None
    try:
        game = get_game(spec.game)
    except ValueError as err:
        raise GameSpecError(f"task.params.game: {err}") from None
    names = spec.policy_names
    if not names:
        raise GameSpecError("policies is empty: name at least one trainable policy")
    if len(names) > game.num_players:
        raise GameSpecError(
            f"policies: {len(names)} trainable policies but {game.name} has {game.num_players} players"
        )
    if len(set(names)) != len(names):
        raise GameSpecError(f"policies={names}: a policy is named twice")
    for name in names:
        if name in OPPONENTS:
            raise GameSpecError(f"policies: {name!r} is the name of a fixed player; give the trainable policy another name")
    if len(names) > 1 and spec.train_seats is None and len(names) != game.num_players:
        raise GameSpecError(
            f"task.params.train_seats: {len(names)} policies for {game.num_players} seats; say who plays each seat "
            f"({', '.join(game.roles)}) in task.params.train_seats"
        )
    for i, seats in enumerate(spec.seats(game)):
        where = f"task.params.train_seats[{i}]"
        if len(seats) != game.num_players:
            raise GameSpecError(f"{where}={seats}: {game.name} has {game.num_players} seats ({', '.join(game.roles)})")
        if not any(who in names for who in seats):
            raise GameSpecError(f"{where}={seats}: no trainable policy plays in it (name one of {names})")
        for who in seats:
            if who == POOL:
                if spec.opponent_pool is None:
                    raise GameSpecError(f"{where}={seats}: a `pool` seat needs task.params.opponent_pool (every, size, sample)")
            elif who not in names:
                _check_player(who, game, where)
    if spec.opponent_pool is not None and not any(POOL in seats for seats in spec.seats(game)):
        raise GameSpecError(
            "task.params.opponent_pool is set but no game of task.params.train_seats has a `pool` seat: name `pool` "
            "in a seat (e.g. [[policy, pool], [pool, policy]]) or drop opponent_pool"
        )
    seated = {who for seats in spec.seats(game) for who in seats}
    for name in names:
        if name not in seated:
            raise GameSpecError(
                f"policies.{name}: this policy plays no seat in task.params.train_seats={spec.seats(game)}, "
                "so it would never be trained; seat it, or remove it"
            )
    for who in spec.opponents(game):
        if who == POOL:
            raise GameSpecError("task.params.eval_opponents: `pool` plays in training games only; evaluation meets fixed players")
        if who in names:
            raise GameSpecError(f"task.params.eval_opponents: {who!r} is a trainable policy; name fixed players ({', '.join(OPPONENTS)})")
        _check_player(who, game, "task.params.eval_opponents")
    return spec, game


def _check_player(who: str, game: Game, where: str) -> None:
    try:
        check_opponent(who, game)
    except ValueError as err:
        raise GameSpecError(f"{where}: {err}") from None
