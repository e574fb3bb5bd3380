"""The env's own reward as a reward component: `reward.components: [{name: env, fn: env_reward}]`.

An env reports its reward in `StepResult.info["env_reward"]` (the adapters for gym-style, SkyRL,
TRL and verifiers envs do; a reinforge Env class of the user's own may too). The rollout loop sums
the numeric info of every step into `trajectory.stats`, so `trajectory.stats["env_reward"]` is the
episode's return: the sum of a gym env's step rewards, or the one final score an env reports when
the episode ends (TRL's `get_reward()`, a verifiers rubric). As a component it is weighted,
combined, logged per component and counted on failure like any other reward.

An episode that carries no env reward (the env never reported one, or the rollout loop cut the
episode before the env could score it) is a reward failure, named and counted, never a silent 0.
"""

from __future__ import annotations

from reinforge.envs.base import ENV_REWARD
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


class EnvReward:
    """The episode's env reward, `trajectory.stats["env_reward"]`."""

    deterministic = False  # the same final text can end episodes the env scored differently

    def __call__(self, task: Task, trajectory: Trajectory) -> float:
        if ENV_REWARD not in trajectory.stats:
            raise ValueError(
                f"the episode of task {task.id} carries no env reward (finish reason {trajectory.finish_reason}); "
                "env_reward needs an env that reports StepResult.info['env_reward'] (the gym / SkyRL / TRL / verifiers "
                "adapters do, at each step or when the episode ends; an episode cut by env.max_episode_tokens before "
                "the env scored it has none)"
            )
        return float(trajectory.stats[ENV_REWARD])
