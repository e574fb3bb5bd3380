"""Checks of a text-game run's config, before any model is loaded (called by envs.factory.check_env_config)."""

from __future__ import annotations

from reinforge.config import Config, ConfigError
from reinforge.import_paths import is_import_path
from reinforge.textgames.spec import TextGameSpecError, parse_spec


def check_text_game_config(cfg: Config) -> None:
    env = cfg.env
    if cfg.task.source != "text_game":
        raise ConfigError(f"env.type=text_game plays the puzzles of task.source=text_game (docs/games.md), not task.source={cfg.task.source}")
    try:
        _, game = parse_spec(cfg.task.params)
    except TextGameSpecError as err:
        raise ConfigError(str(err)) from None
    if env.tools or env.params:
        raise ConfigError("env.type=text_game takes no env.tools or env.params; the game is set in task.params (docs/games.md)")
    if cfg.rollout.prompt_format == "raw":
        raise ConfigError("env.type=text_game lays out the game as chat messages; rollout.prompt_format=raw cannot hold them (use auto or chat)")
    if env.max_turns < game.max_moves:
        raise ConfigError(
            f"env.max_turns={env.max_turns} would cut {game.name} games before their own end: a game can take "
            f"{game.max_moves} moves (task.params.options); set env.max_turns >= {game.max_moves} (a few more leave room for "
            "illegal attempts), or lower the game's own limit"
        )
    fns = [c.fn for c in cfg.reward.components]
    if "env_reward" not in fns or any(fn != "env_reward" and not is_import_path(fn) for fn in fns):
        raise ConfigError(
            f"reward.components use {fns}: a text game's reward is its result, reported as the env reward; set "
            "reward.components: [{name: game, fn: env_reward}] (your own reward functions by import path may be added)"
        )
