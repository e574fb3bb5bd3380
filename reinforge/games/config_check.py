"""Checks of a game run's config, before any model is loaded (called by run.env_factory.check_env_config)."""

from __future__ import annotations

from reinforge.config import Config, ConfigError
from reinforge.envs.chat_game_env import check_chat_game_config
from reinforge.games.spec import GameSpecError, parse_spec


def check_game_config(cfg: Config) -> None:
    if cfg.task.source != "game":
        raise ConfigError(f"env.type=game plays the game setups of task.source=game (docs/games.md), not task.source={cfg.task.source}")
    try:
        spec, game = parse_spec(cfg.task.params, list(cfg.policies))
    except GameSpecError as err:
        raise ConfigError(str(err)) from None
    check_chat_game_config(cfg, game.name, game.max_moves, "game")
    # Several policies: each has its own learner, engine (in-process, Ray workers or vLLM), reference,
    # critic, LoRA adapters, adaptive coefficients and prompt-value model (reinforge.values.item_seats),
    # built by the same builders as one policy's; the async producer holds a lane per policy.
    if len(spec.policy_names) > 1:
        if spec.opponent_pool is not None:
            raise ConfigError(
                f"task.params.opponent_pool: a pool snapshots one policy, and policies={spec.policy_names} "
                "trains several; an opponent pool per policy is not built (drop opponent_pool)"
            )
    if spec.opponent_pool is not None:
        if cfg.trainer.schedule == "async":
            raise ConfigError(
                "task.params.opponent_pool with trainer.schedule=async: the pool snapshots the policy between steps, "
                "while async sampling runs ahead of the updates, so which members a game could meet would depend on "
                "thread timing (not reproducible); use trainer.schedule=sync"
            )
    if spec.ratings:
        from reinforge.games.ratings import check_ratings_available

        check_ratings_available()
    for i, seats in enumerate(spec.seats(game)):
        policy_seats = sum(who in spec.policy_names for who in seats)
        if cfg.rollout.group_size % policy_seats:
            raise ConfigError(
                f"rollout.group_size={cfg.rollout.group_size} is not a multiple of the {policy_seats} policy seats of "
                f"task.params.train_seats[{i}]={seats}: a group is one trajectory per policy seat per game"
            )
        if cfg.algo.advantage in ("dr_mas", "mars") and cfg.rollout.group_size // policy_seats < 2:
            raise ConfigError(
                f"algo.advantage={cfg.algo.advantage} normalizes each role within its group: rollout.group_size={cfg.rollout.group_size} "
                f"gives {cfg.rollout.group_size // policy_seats} game(s) per group for task.params.train_seats[{i}]={seats}; "
                "it needs at least 2 (raise rollout.group_size)"
            )

