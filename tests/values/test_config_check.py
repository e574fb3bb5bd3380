"""Settings the prompt-value model cannot serve are refused before compute, with the reason."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.values.config_check import check_curriculum_tasks, check_prompt_value
from reinforge.run.preflight import preflight
from reinforge.tasks.task import Task, TaskSplits

ONE_REWARD = "reward.components=[{name: correct, fn: verifier}]"
PCL = ["prompt_value.enabled=true", "prompt_value.curriculum=pcl"]


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        preflight(load_config("default", list(overrides)))
    return str(err.value)


def test_the_supported_settings_pass():
    preflight(load_config("default", [*PCL, ONE_REWARD, "algo.advantage=v05_prior"]))
    preflight(load_config("default", ["prompt_value.curriculum=dump"]))
    preflight(load_config("default", ["prompt_value.curriculum=dump", "algo.dynamic_sampling=true"]))  # no model to starve
    # Versioned draws and outcomes learned when they arrive (reinforge.values.curriculum_sampler), dropped groups included.
    for schedule in (["trainer.schedule=async"], ["trainer.partial_rollouts=true"], ["algo.dynamic_sampling=true"]):
        preflight(load_config("default", [*PCL, *schedule, "algo.tis_cap=2.0"]))
    preflight(load_config("default", ["prompt_value.curriculum=dump", "trainer.schedule=async", "algo.tis_cap=2.0"]))


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (["algo.advantage=v05_prior", ONE_REWARD], "set prompt_value.enabled=true"),
        (["prompt_value.curriculum=pcl"], "scores candidate prompts with the prompt-value model"),
        # under async the producer featurizes with its own in-process engine's copy of the sampling weights
        ([*PCL, "trainer.schedule=async", "algo.tis_cap=2.0", "workers.workers=1"], "reads the sampling weights' prompt states"),
        ([*PCL, "prompt_value.component=nope"], "prompt_value.component='nope' is not a reward component"),
        ([*PCL, "algo.advantage=v05_prior"], "one 0/1 reward component"),  # the default recipe adds a format bonus
    ],
)
def test_unservable_settings_are_refused_with_the_reason(overrides, reason):
    assert reason in refused(*overrides)


def tasks(n: int, metadata) -> TaskSplits:
    return TaskSplits(train=[Task(id=str(i), prompt=f"{i}+1=", answer=str(i + 1), metadata=metadata(i)) for i in range(n)], eval=[])


def test_a_pool_larger_than_the_training_set_is_refused():
    cfg = load_config("default", [*PCL, "rollout.prompts_per_step=8", "prompt_value.pool_factor=4"])
    with pytest.raises(ConfigError, match="32 candidates per step, but there are only 20 training tasks"):
        check_curriculum_tasks(cfg, tasks(20, lambda i: {}))


def test_partial_rollouts_draw_a_pool_for_every_group_in_flight():
    # 8 prompts, 12 groups in flight at the first step: 48 candidates, more than 40 tasks (32 would fit)
    cfg = load_config("default", [*PCL, "rollout.prompts_per_step=8", "prompt_value.pool_factor=4", "trainer.partial_rollouts=true"])
    with pytest.raises(ConfigError, match="= 48 candidates per step, but there are only 40 training tasks"):
        check_curriculum_tasks(cfg, tasks(40, lambda i: {}))
    check_curriculum_tasks(cfg, tasks(48, lambda i: {}))


def test_dump_needs_a_metadata_key_with_several_values():
    cfg = load_config("default", ["prompt_value.curriculum=dump", "prompt_value.dump_key=digits"])
    with pytest.raises(ConfigError, match="task 0 has no such metadata key"):
        check_curriculum_tasks(cfg, tasks(4, lambda i: {"family": "x"}))
    with pytest.raises(ConfigError, match="every training task has digits='2'"):
        check_curriculum_tasks(cfg, tasks(4, lambda i: {"digits": 2}))
    check_curriculum_tasks(cfg, tasks(4, lambda i: {"digits": i % 2 + 1}))


def test_envs_without_a_declared_outcome_per_item_are_refused():
    # The env section's own checks run first in preflight (a text game needs its task source): this one directly.
    # A game and a gateway agent are served (reinforge.values.item_seats); a text game is not declared.
    with pytest.raises(ConfigError, match="serves env.type in"):
        check_prompt_value(load_config("default", [*PCL, "env.type=text_game"]), needs_prompt_values=False)
    for env in ("game", "gateway"):
        check_prompt_value(load_config("default", [*PCL, f"env.type={env}"]), needs_prompt_values=False)


def test_the_v05_prior_is_refused_for_a_game():
    cfg = load_config("default", [*PCL, "env.type=game", ONE_REWARD, "algo.advantage=v05_prior"])
    with pytest.raises(ConfigError, match="a game's group holds the outcomes of each trained seat"):
        check_prompt_value(cfg, needs_prompt_values=True)
