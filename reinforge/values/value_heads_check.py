"""Preflight of the success head (rollout pruning, value voting) and SPA turn progress: what they
cannot serve is refused before any model is loaded, with the reason."""

from __future__ import annotations

from reinforge.algos.advantages import get_estimator
from reinforge.config import Config, ConfigError
from reinforge.engines.torch_engine import MAX_BATCH_SIZE
from reinforge.learner.success_head_learner import check_interval
from reinforge.values.capabilities import check_value_capabilities


def check_value_heads(cfg: Config) -> None:
    s, p = cfg.success_head, cfg.progress
    if s.prune and not s.enabled:
        raise ConfigError("success_head.prune=true prunes with the success head's predictions: set success_head.enabled=true")
    check_value_capabilities(cfg)  # env, schedule, partial rollouts, engine (reinforge.values.capabilities)
    if s.prune:
        group = cfg.rollout.group_size
        needed = max(s.min_group_size, get_estimator(cfg.algo.advantage).min_group_size)
        if s.min_group_size > group:
            raise ConfigError(f"success_head.min_group_size={s.min_group_size} exceeds rollout.group_size={group}: nothing could be pruned; lower it")
        if needed > s.min_group_size:
            raise ConfigError(f"success_head.min_group_size={s.min_group_size} but algo.advantage={cfg.algo.advantage} needs groups of at least {needed}")
        rows = cfg.rollout.prompts_per_step * group
        # Only the TorchEngine's decode loop holds a call's rows in one batch (chunked sampling has no such bound).
        in_decode_loop = cfg.engine.type == "torch" and cfg.workers.workers == 0 and not cfg.trainer.partial_rollouts
        if in_decode_loop and cfg.env.type == "single_turn" and rows > MAX_BATCH_SIZE:
            raise ConfigError(
                f"success_head.prune=true samples all {rows} rows of a step (rollout.prompts_per_step x rollout.group_size) in one "
                f"engine batch, at most {MAX_BATCH_SIZE}; lower one of them"
            )
        every = check_interval(s.check_every, cfg.rollout.max_new_tokens)
        if every >= cfg.rollout.max_new_tokens:
            raise ConfigError(
                f"success_head.check_every={every} is not below rollout.max_new_tokens={cfg.rollout.max_new_tokens}: "
                "no pruning check would ever run; lower it"
            )
    if p.enabled:
        estimator = get_estimator(cfg.algo.advantage)
        if not (estimator.turn_level or estimator.needs_critic):  # gae takes them at each turn's end (SPA-RL's PPO)
            raise ConfigError(
                f"progress.enabled=true gives per-turn rewards that sum to the outcome, which changes nothing for the episode-level "
                f"algo.advantage={cfg.algo.advantage}: use a turn-level estimator (turn_rloo) or gae with critic.enabled=true (SPA-RL's PPO)"
            )
        if cfg.algo.turn_reward_fix != "none" or cfg.algo.turn_reward_gate is not None:
            raise ConfigError(
                "progress.enabled=true sets the per-turn rewards itself; algo.turn_reward_fix / algo.turn_reward_gate would "
                "reshape them and break their sum: leave them at none / null"
            )
