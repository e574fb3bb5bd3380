"""The single-turn rollout: sample a group of responses per task and build Trajectories."""

from __future__ import annotations

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.rollout.trajectory import Trajectory
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
        prompt = prompts[task_index]
        sampled = generation.token_ids
        trajectories.append(
            Trajectory(
                task_id=tasks[task_index].id,
                group_id=first_group_id + task_index,
                token_ids=prompt + sampled,
                loss_mask=[False] * len(prompt) + [True] * len(sampled),
                behaviour_logprobs=[0.0] * len(prompt) + generation.logprobs,
                turn_spans=[(len(prompt), len(prompt) + len(sampled))],
                prompt_length=len(prompt),
                response_text=env.decode_response(sampled),
                policy_version=generation.policy_version,
                finish_reason=generation.finish_reason,
                errors=list(generation.errors),
            )
        )
    return trajectories
