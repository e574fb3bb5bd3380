"""Held-out evaluation: greedy accuracy, mean@k and pass@k, with the task's own verifier.

The one evaluation used everywhere: the training loop calls `evaluate` for its eval metrics and
`reinforge eval` calls it for its report (adding confidence intervals from the same records).
"""

from __future__ import annotations

import numpy as np

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.rewards.verifiers import verify
from reinforge.tasks.task import Task
from reinforge.trainer.eval_metrics import per_task_scores, record_family


def task_family(task: Task) -> str:
    """`metadata["family"]` as set by the task source; "all" for tasks without one."""
    return str(task.metadata.get("family", "all"))


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
    """Returns metrics and one record per task.

    Metrics: `accuracy` (greedy), `mean@{samples}` (fraction of the samples drawn at
    `temperature` that solve the task), `pass@{samples}` (unbiased estimator, here: some sample
    solves it), `accuracy/{family}` per task family, and `eval_tasks`. Records hold the task id,
    prompt, answer, family, greedy response and correctness, and the sampled responses with
    their correctness (`sample_correct`), which `eval_metrics.summarize` turns into CIs.

    A task counts as solved by a response when its verifier scores it 1.0 (partial credit, as some
    reasoning-gym scorers give, does not count as solved). Two batched engine calls in all.
    """
    prompts = [env.prompt_ids(task) for task in tasks]
    greedy = engine.generate(prompts, SamplingParams(max_new_tokens, 0.0, stop_token_ids=stop_token_ids))
    sampled = (
        engine.generate(
            [p for p in prompts for _ in range(samples)],
            SamplingParams(max_new_tokens, temperature, stop_token_ids=stop_token_ids),
            seed=seed,
        )
        if samples > 0
        else []
    )
    records = []
    for i, task in enumerate(tasks):
        response = env.decode_response(greedy[i].token_ids)
        responses = [env.decode_response(g.token_ids) for g in sampled[i * samples : (i + 1) * samples]]
        records.append(
            {
                "task_id": task.id,
                "family": task_family(task),
                "prompt": task.prompt,
                "answer": task.answer,
                "greedy": response,
                "correct": verify(task, response) >= 1.0,
                "samples": responses,
                "sample_correct": [verify(task, r) >= 1.0 for r in responses],
            }
        )
    scores = per_task_scores(records, k_values=[samples])
    metrics = {name: float(values.mean()) for name, values in scores.items()}
    families = sorted({r["family"] for r in records})
    for family in families:
        metrics[f"accuracy/{family}"] = float(np.mean([r["correct"] for r in records if record_family(r) == family]))
    metrics["eval_tasks"] = float(len(tasks))
    return metrics, records
