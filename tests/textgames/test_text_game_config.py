"""A text-game config is refused before any compute, naming the key; the shipped recipes pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.run.preflight import preflight

RECIPES = Path(__file__).parents[2] / "recipes"


def config(*overrides: str, recipe: str = "maze"):
    return load_config(str(RECIPES / f"{recipe}.yaml"), list(overrides))


@pytest.mark.parametrize("recipe", ["maze", "twenty-questions"])
def test_the_recipes_pass(recipe) -> None:
    preflight(config(recipe=recipe))


def test_the_wordle_recipe_passes_or_names_the_extra() -> None:
    try:
        from importlib.metadata import version

        import wordfreq  # noqa: F401
    except ImportError:
        with pytest.raises(ConfigError, match=r"task.params.options: .*pip install 'reinforge\[wordle\]'"):
            preflight(config(recipe="wordle"))
    else:
        assert version("wordfreq") == "3.1.1"  # the version the extra pins
        preflight(config(recipe="wordle"))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["task.params.game=chess"], "task.params.game: unknown text game 'chess'"),
        (["task.params.options.size=1"], "task.params.options: option size of maze"),
        (["task.params.options.colour=red"], r"task.params.options: unknown option\(s\) \['colour'\] of maze"),
        (["task.params.max_illegal_moves=0"], "task.params.max_illegal_moves"),
        (["task.params.teacher_noise=2"], "task.params.teacher_noise"),
        (["task.params.reward=1"], "task.params.reward"),
        (["env.max_turns=10"], r"env.max_turns=10 would cut maze games before their own end: .* 12 moves"),
        (["env.type=single_turn"], "task.source=text_game describes puzzles, which only env.type=text_game plays"),
        (["reward.components=[{name: c, fn: exact_match}]"], "a text game's reward is its result"),
        (["rollout.prompt_format=raw"], "rollout.prompt_format=raw"),
        (["env.params={a: 1}"], "env.type=text_game takes none"),
        (["env.tools=[calculator]"], "env.type=text_game takes no env.tools"),
    ],
)
def test_bad_configs_are_refused_naming_the_key(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        preflight(config(*overrides))


def test_the_text_game_env_plays_only_text_game_puzzles() -> None:
    from reinforge.run.env_factory import check_env_config

    cfg = config()
    cfg.task.source = "arithmetic"  # a task check would refuse the game's params first
    with pytest.raises(ConfigError, match="env.type=text_game plays the puzzles of task.source=text_game .* not task.source=arithmetic"):
        check_env_config(cfg)
