"""Checks of a text-game run's config, before any model is loaded (called by run.env_factory.check_env_config)."""

from __future__ import annotations

from reinforge.config import Config, ConfigError
from reinforge.envs.chat_game_env import check_chat_game_config
from reinforge.textgames.spec import TextGameSpecError, parse_spec


def check_text_game_config(cfg: Config) -> None:
    if cfg.task.source != "text_game":
        raise ConfigError(f"env.type=text_game plays the puzzles of task.source=text_game (docs/games.md), not task.source={cfg.task.source}")
    try:
        _, game = parse_spec(cfg.task.params)
    except TextGameSpecError as err:
        raise ConfigError(str(err)) from None
    check_chat_game_config(cfg, game.name, game.max_moves, "text game")
