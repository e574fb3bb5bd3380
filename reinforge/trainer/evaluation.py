"""Held-out evaluation: greedy accuracy and mean@k, with the task's own verifier."""

from __future__ import annotations

import statistics

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.rewards.verifiers import verify
from reinforge.tasks.task import Task


def evaluate(
    engine: Engine,
    env: SingleTurnEnv,
    tasks: list[Task],
    max_new_tokens: int,
    stop_token_ids: tuple[int, ...],
    samples: int = 4,
    temperature: float = 1.0,
    seed: int = 0,
) -> tuple[dict[str, float], list[dict]]:
    """Returns metrics {accuracy: greedy, mean@k: sampled at `temperature`} and per-task records.

    A task counts as solved by a response when its verifier scores it 1.0 (partial credit, as some
    reasoning-gym scorers give, counts toward the mean but not as solved).
    """
    prompts = [env.prompt_ids(task) for task in tasks]
    greedy = engine.generate(prompts, SamplingParams(max_new_tokens, 0.0, stop_token_ids=stop_token_ids))
    sampled = engine.generate(
        [p for p in prompts for _ in range(samples)],
        SamplingParams(max_new_tokens, temperature, stop_token_ids=stop_token_ids),
        seed=seed,
    )
    records, greedy_correct, sampled_correct = [], [], []
    for i, task in enumerate(tasks):
        response = env.decode_response(greedy[i].token_ids)
        correct = verify(task, response) >= 1.0
        group = sampled[i * samples : (i + 1) * samples]
        sample_scores = [verify(task, env.decode_response(g.token_ids)) >= 1.0 for g in group]
        greedy_correct.append(float(correct))
        sampled_correct.append(statistics.fmean(sample_scores))
        records.append({"task_id": task.id, "prompt": task.prompt, "answer": task.answer, "greedy": response, "correct": correct})
    metrics = {
        "accuracy": statistics.fmean(greedy_correct),
        f"mean@{samples}": statistics.fmean(sampled_correct),
        "eval_tasks": float(len(tasks)),
    }
    return metrics, records
