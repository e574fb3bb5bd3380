"""Preflight of the success head (rollout pruning, value voting) and SPA turn progress: what they
cannot serve is refused before any model is loaded, with the reason."""

from __future__ import annotations

from reinforge.algos.advantages import get_estimator
from reinforge.config import Config, ConfigError
from reinforge.engines.torch_engine import MAX_BATCH_SIZE

NO_ENV_TURNS = ("game", "gateway")  # per-player trajectories / agent episodes in pieces: no one turn sequence per episode


def check_value_heads(cfg: Config) -> None:
    s, p, t = cfg.success_head, cfg.progress, cfg.trainer
    if s.prune and not s.enabled:
        raise ConfigError("success_head.prune=true prunes with the success head's predictions: set success_head.enabled=true")
    for key, on in (("success_head.enabled", s.enabled), ("progress.enabled", p.enabled)):
        if not on:
            continue
        if t.schedule != "sync" or t.partial_rollouts:
            what = "trainer.partial_rollouts=true" if t.partial_rollouts else "trainer.schedule=async"
            raise ConfigError(
                f"{key}=true trains on each step's batch with the policy that sampled it, which only the sync schedule "
                f"without partial rollouts guarantees; {what} is not supported with it: use trainer.schedule=sync"
            )
    if s.enabled and cfg.env.type != "single_turn":
        raise ConfigError(
            f"success_head.enabled=true reads single-turn responses (prompt, then one sampled response); env.type={cfg.env.type} "
            "is not supported (for multi-turn credit see progress.enabled)"
        )
    if s.prune:
        if cfg.engine.type != "torch" or cfg.workers.workers > 0:
            where = f"engine.type={cfg.engine.type}" if cfg.engine.type != "torch" else f"workers.workers={cfg.workers.workers} (Ray rollout workers)"
            raise ConfigError(
                f"success_head.prune=true stops rows inside our in-process PyTorch engine's decode loop; {where} has no such hook: "
                "use engine.type=torch and workers.workers=0, or success_head.prune=false"
            )
        group = cfg.rollout.group_size
        needed = max(s.min_group_size, get_estimator(cfg.algo.advantage).min_group_size)
        if s.min_group_size > group:
            raise ConfigError(f"success_head.min_group_size={s.min_group_size} exceeds rollout.group_size={group}: nothing could be pruned; lower it")
        if needed > s.min_group_size:
            raise ConfigError(f"success_head.min_group_size={s.min_group_size} but algo.advantage={cfg.algo.advantage} needs groups of at least {needed}")
        rows = cfg.rollout.prompts_per_step * group
        if rows > MAX_BATCH_SIZE:
            raise ConfigError(
                f"success_head.prune=true samples all {rows} rows of a step (rollout.prompts_per_step x rollout.group_size) in one "
                f"engine batch, at most {MAX_BATCH_SIZE}; lower one of them"
            )
        if s.check_every >= cfg.rollout.max_new_tokens:
            raise ConfigError(
                f"success_head.check_every={s.check_every} is not below rollout.max_new_tokens={cfg.rollout.max_new_tokens}: "
                "no pruning check would ever run; lower it"
            )
    if p.enabled:
        if cfg.env.type == "single_turn" or cfg.env.type in NO_ENV_TURNS:
            raise ConfigError(
                f"progress.enabled=true spreads a multi-turn episode's outcome over its turns; env.type={cfg.env.type} "
                "has no such episodes (single_turn: one turn; game / gateway: not supported): use a multi-turn env such as env.type=tool"
            )
        if not get_estimator(cfg.algo.advantage).turn_level:
            raise ConfigError(
                f"progress.enabled=true gives per-turn rewards that sum to the outcome, which changes nothing for the episode-level "
                f"algo.advantage={cfg.algo.advantage}: use a turn-level estimator (turn_rloo)"
            )
        if cfg.algo.turn_reward_fix != "none" or cfg.algo.turn_reward_gate is not None:
            raise ConfigError(
                "progress.enabled=true sets the per-turn rewards itself; algo.turn_reward_fix / algo.turn_reward_gate would "
                "reshape them and break their sum: leave them at none / null"
            )
