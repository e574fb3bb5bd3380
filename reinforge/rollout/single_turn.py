"""The single-turn rollout: sample a group of responses per task and build Trajectories."""

from __future__ import annotations

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.rollout.trajectory import Trajectory, single_turn_trajectory
from reinforge.tasks.task import Task


def rollout_groups(
    engine: Engine,
    env: SingleTurnEnv,
    tasks: list[Task],
    group_size: int,
    params: SamplingParams,
    seed: int | None,
    first_group_id: int = 0,
) -> list[Trajectory]:
    """`group_size` responses for each task in one batched engine call; group ids are consecutive."""
    prompts = [env.prompt_ids(task) for task in tasks]
    batch = [prompt for prompt in prompts for _ in range(group_size)]
    generations = engine.generate(batch, params, seed=seed)
    trajectories = []
    for index, generation in enumerate(generations):
        task_index = index // group_size
        trajectories.append(
            single_turn_trajectory(
                task_id=tasks[task_index].id,
                prompt_ids=prompts[task_index],
                sampled_ids=generation.token_ids,
                logprobs=generation.logprobs,
                response_text=env.decode_response(generation.token_ids),
                finish_reason=generation.finish_reason,
                group_id=first_group_id + task_index,
                policy_version=generation.policy_version,
                errors=generation.errors,
            )
        )
    return trajectories
