"""reinforge: RL post-training for language models and agents, from a 2-core laptop to a Ray cluster.

The stable API is what `__all__` lists; everything else in the package may change between versions
(import it at your own risk). `import reinforge` is cheap: the names below are imported on first use.

Run:
    load_config(recipe="default", overrides=(), **sections) -> Config
    train(config_or_recipe="default", overrides=(), *, reward_fns=, env=, env_params=, tasks=,
          tools=, advantage=, policy_loss=, model=, output_dir=, resume=, ...) -> TrainResult
    evaluate(run_dir_or_model, overrides=(), *, samples=, tasks=, env=, ...) -> EvalResult
    Config, ConfigError, TrainResult, EvalResult

Write your own parts (contracts and examples: docs/extending.md):
    tasks        Task, TaskSplits
    rewards      RewardFn, GroupRewardFn, group_reward, Trajectory
    envs         Env, Episode, StepResult
    tools        Tool, tool_from_function, ToolRegistry
    algorithms   register_advantage, AdvantageInputs, AdvantageOutput, PolicyLossParams

A part passed to `train` as a Python object and the same part named in a recipe by import path
('my_pkg.rewards:score') are the same thing: reinforge.api.objects turns the object into its
import path when it has one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> module that defines it; imported on first access (torch and transformers take seconds).
_EXPORTS = {
    "load_config": "reinforge.api.config",
    "train": "reinforge.api.train",
    "TrainResult": "reinforge.api.train",
    "evaluate": "reinforge.api.evaluate",
    "EvalResult": "reinforge.api.evaluate",
    "Config": "reinforge.config",
    "ConfigError": "reinforge.config",
    "Task": "reinforge.tasks.task",
    "TaskSplits": "reinforge.tasks.task",
    "Trajectory": "reinforge.rollout.trajectory",
    "RewardFn": "reinforge.rewards.base",
    "GroupRewardFn": "reinforge.rewards.group",
    "group_reward": "reinforge.rewards.user_rewards",
    "Env": "reinforge.envs.base",
    "Episode": "reinforge.envs.base",
    "StepResult": "reinforge.envs.base",
    "Tool": "reinforge.envs.tools.registry",
    "ToolRegistry": "reinforge.envs.tools.registry",
    "tool_from_function": "reinforge.envs.tools.registry",
    "register_advantage": "reinforge.algos.advantages",
    "AdvantageInputs": "reinforge.algos.types",
    "AdvantageOutput": "reinforge.algos.types",
    "PolicyLossParams": "reinforge.algos.losses.policy_common",
}

__all__ = [
    "AdvantageInputs", "AdvantageOutput", "Config", "ConfigError", "Env", "Episode", "EvalResult", "GroupRewardFn",
    "PolicyLossParams", "RewardFn", "StepResult", "Task", "TaskSplits", "Tool", "ToolRegistry", "TrainResult",
    "Trajectory", "evaluate", "group_reward", "load_config", "register_advantage", "tool_from_function", "train",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'reinforge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ imports on demand
    from reinforge.algos.advantages import register_advantage
    from reinforge.algos.losses.policy_common import PolicyLossParams
    from reinforge.algos.types import AdvantageInputs, AdvantageOutput
    from reinforge.api.config import load_config
    from reinforge.api.evaluate import EvalResult, evaluate
    from reinforge.api.train import TrainResult, train
    from reinforge.config import Config, ConfigError
    from reinforge.envs.base import Env, Episode, StepResult
    from reinforge.envs.tools.registry import Tool, ToolRegistry, tool_from_function
    from reinforge.rewards.base import RewardFn
    from reinforge.rewards.group import GroupRewardFn
    from reinforge.rewards.user_rewards import group_reward
    from reinforge.rollout.trajectory import Trajectory
    from reinforge.tasks.task import Task, TaskSplits
