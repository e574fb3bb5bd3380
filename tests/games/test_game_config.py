"""A game config is refused before any compute, naming the key: unknown game or player, too many
trainable policies, a group that does not hold whole games, settings games cannot run with."""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.run.env_factory import check_env_config
from reinforge.games.spec import GameSpecError, parse_spec
from reinforge.run.preflight import preflight


RECIPE = str(Path(__file__).parents[2] / "recipes" / "tictactoe-selfplay.yaml")


def config(*overrides: str):
    return load_config(RECIPE, list(overrides))


def test_the_recipe_passes() -> None:
    preflight(config())


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["task.params.game=chess"], "task.params.game: unknown game 'chess'"),
        (["task.params.train_seats=[[policy, grandmaster]]"], "task.params.train_seats[0]: unknown player 'grandmaster'"),
        (["task.params.eval_opponents=[random, nobody]"], "task.params.eval_opponents: unknown player 'nobody'"),
        (["task.params.eval_opponents=[policy]"], "is a trainable policy"),
        (["task.params.train_seats=[[random, minimax]]"], "no trainable policy plays in it"),
        (["task.params.train_seats=[[policy, policy, policy]]"], "tictactoe has 2 seats"),
        (["policies=[a, b, c]"], "3 trainable policies but tictactoe has 2 players"),
        (["policies=[a, b]"], "task.params.train_seats[0]=['policy', 'policy']: no trainable policy plays in it (name one of ['a', 'b'])"),
        (["task.params.game=connect_four", "env.max_turns=45", "task.params.eval_opponents=[minimax]"], "minimax searches the whole game tree"),
        (["task.params.max_illegal_moves=0"], "task.params.max_illegal_moves"),
        (["task.params.colour=red"], "task.params.colour"),
        (["env.type=single_turn"], "task.source=game describes games, which only env.type=game plays"),
        (["env.max_turns=4"], "env.max_turns=4 would cut tictactoe games before their own end"),
        (["rollout.group_size=7"], "rollout.group_size=7 is not a multiple of the 2 policy seats"),
        (["rollout.group_size=2"], "algo.advantage=dr_mas normalizes each role within its group"),
        (["rollout.prompt_format=raw"], "rollout.prompt_format=raw"),
        (["reward.components=[{name: correct, fn: verifier}]"], "a game's reward is its result"),
        (["env.tools=[calculator]"], "env.type=game takes no env.tools"),
    ],
)
def test_bad_game_configs_are_refused_before_compute(overrides, message) -> None:
    with pytest.raises(ConfigError) as err:
        preflight(config(*overrides))
    assert message in str(err.value)


def test_a_game_env_needs_game_tasks() -> None:
    cfg = config()
    cfg.task.source, cfg.task.params = "arithmetic", {}
    with pytest.raises(ConfigError, match="env.type=game plays the game setups of task.source=game"):
        check_env_config(cfg)


def test_defaults_are_self_play_and_the_games_fixed_players() -> None:
    spec, game = parse_spec({"game": "kuhn_poker"})
    assert spec.seats(game) == [["policy", "policy"]] and spec.opponents(game) == ["random", "kuhn_equilibrium"]
    spec, game = parse_spec({"game": "connect_four"})
    assert spec.opponents(game) == ["random"]
    with pytest.raises(GameSpecError, match="task.params.game: Field required"):
        parse_spec({})
