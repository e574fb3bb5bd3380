"""Settings the prompt-value model cannot serve, refused before compute with the reason and the fix."""

from __future__ import annotations

import math

from reinforge.config import Config, ConfigError
from reinforge.tasks.task import TaskSplits
from reinforge.values.capabilities import check_value_capabilities


def check_prompt_value(cfg: Config, needs_prompt_values: bool) -> None:
    """The config alone (preflight): before tasks or models are loaded."""
    pv = cfg.prompt_value
    if needs_prompt_values and not pv.enabled:
        raise ConfigError(
            f"algo.advantage={cfg.algo.advantage} shrinks each group's mean toward the prompt-value model's predicted pass rate: "
            "set prompt_value.enabled=true"
        )
    if pv.curriculum == "pcl" and not pv.enabled:
        raise ConfigError("prompt_value.curriculum=pcl scores candidate prompts with the prompt-value model: set prompt_value.enabled=true")
    check_value_capabilities(cfg)  # env, schedule, partial rollouts, dynamic sampling (reinforge.values.capabilities)
    if needs_prompt_values and cfg.env.type == "game":
        raise ConfigError(
            f"algo.advantage={cfg.algo.advantage} shrinks each group's mean toward one predicted pass rate, and a game's group "
            "holds the outcomes of each trained seat (X's wins are O's losses), each predicted apart; use algo.advantage=dr_mas "
            "with env.type=game (the curriculum, prompt_value.curriculum=pcl, serves games)"
        )
    names = [c.name for c in cfg.reward.components]
    if pv.component is not None and pv.component not in names:
        raise ConfigError(f"prompt_value.component={pv.component!r} is not a reward component; components: {', '.join(names)}")
    if needs_prompt_values and (len(names) != 1 or (pv.component is not None and pv.component != names[0])):
        raise ConfigError(
            f"algo.advantage={cfg.algo.advantage} puts the predicted pass rate on the reward's scale, so the reward must be the "
            f"success itself: one 0/1 reward component (got {names}); drop the shaping components or use another estimator"
        )


def check_curriculum_tasks(cfg: Config, tasks: TaskSplits) -> None:
    """After the tasks are loaded, before any model: the pool and the distributions exist."""
    pv = cfg.prompt_value
    if pv.curriculum == "pcl":
        prompts = cfg.rollout.prompts_per_step
        drawn, what = prompts, "rollout.prompts_per_step"
        if cfg.trainer.partial_rollouts:  # the first step draws every group it keeps in flight
            drawn, what = max(prompts, math.ceil(cfg.trainer.overprovision * prompts)), "the groups in flight (trainer.overprovision x rollout.prompts_per_step)"
        pool = pv.pool_factor * drawn
        if pool > len(tasks.train):
            raise ConfigError(
                f"prompt_value.pool_factor x {what} = {pool} candidates per step, but there are only "
                f"{len(tasks.train)} training tasks; lower prompt_value.pool_factor"
            )
    if pv.curriculum == "dump":
        missing = next((t for t in tasks.train if pv.dump_key not in t.metadata), None)
        if missing is not None:
            raise ConfigError(
                f"prompt_value.dump_key={pv.dump_key!r}: task {missing.id} has no such metadata key (its keys: "
                f"{sorted(missing.metadata)}); name a key every training task has"
            )
        names = {str(t.metadata[pv.dump_key]) for t in tasks.train}
        if len(names) < 2:
            raise ConfigError(
                f"prompt_value.curriculum=dump chooses among distributions, but every training task has "
                f"{pv.dump_key}={next(iter(names))!r}; name a key with several values"
            )
