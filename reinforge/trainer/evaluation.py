"""Held-out evaluation: greedy accuracy, mean@k and pass@k, with the task's own verifier.

The one evaluation used everywhere: the training loop calls `evaluate` for its eval metrics and
`reinforge eval` calls it for its report (adding confidence intervals from the same records).
Multi-turn envs are evaluated on whole episodes, the final turn's answer checked by the verifier.
"""

from __future__ import annotations

import numpy as np

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.base import Env
from reinforge.rollout.episode_metrics import episode_metrics
from reinforge.rollout.episodes import rollout_groups
from reinforge.rewards.verifiers import verify
from reinforge.tasks.task import Task
from reinforge.trainer.eval_metrics import per_task_scores, record_family


def task_family(task: Task) -> str:
    """`metadata["family"]` as set by the task source; "all" for tasks without one."""
    return str(task.metadata.get("family", "all"))


def evaluate(
    engine: Engine,
    env: Env,
    tasks: list[Task],
    max_new_tokens: int,
    samples: int = 4,
    temperature: float = 1.0,
    seed: int = 0,
    max_episode_tokens: int | None = None,
) -> tuple[dict[str, float], list[dict]]:
    """Returns metrics and one record per task.

    Metrics: `accuracy` (greedy), `mean@{samples}` (fraction of the samples drawn at
    `temperature` that solve the task; also the unbiased pass@1), `pass@{samples}` when samples > 1
    (unbiased estimator, here: some sample solves it), `accuracy/{family}` per task family, `eval_tasks`, and for multi-turn envs the
    greedy episodes' tool use (`reinforge.rollout.episode_metrics`). Records hold the task id,
    prompt, answer, family, greedy response (and its turn-by-turn transcript when there are
    several turns) and correctness, and the sampled responses with their correctness
    (`sample_correct`), which `eval_metrics.summarize` turns into CIs.

    Episodes run through the same rollout loop as training (one batched engine call per turn):
    greedy, then `samples` per task at `temperature`. A task counts as solved by a response when
    its verifier scores it 1.0 (partial credit, as some reasoning-gym scorers give, does not
    count as solved).
    """
    stop = env.stop_token_ids
    greedy = rollout_groups(
        engine, env, tasks, 1, SamplingParams(max_new_tokens, 0.0, stop_token_ids=stop), None,
        max_episode_tokens=max_episode_tokens,
    )
    sampled = (
        rollout_groups(
            engine, env, tasks, samples, SamplingParams(max_new_tokens, temperature, stop_token_ids=stop), seed,
            max_episode_tokens=max_episode_tokens,
        )
        if samples > 0
        else []
    )
    records = []
    for i, task in enumerate(tasks):
        response = greedy[i].response_text
        responses = [t.response_text for t in sampled[i * samples : (i + 1) * samples]]
        record = {
            "task_id": task.id,
            "family": task_family(task),
            "prompt": task.prompt,
            "answer": task.answer,
            "greedy": response,
            "correct": verify(task, response) >= 1.0,
            "samples": responses,
            "sample_correct": [verify(task, r) >= 1.0 for r in responses],
        }
        if greedy[i].transcript:
            record["turns"] = greedy[i].transcript
            record["finish_reason"] = greedy[i].finish_reason
        records.append(record)
    scores = per_task_scores(records, k_values=[samples])
    metrics = {name: float(values.mean()) for name, values in scores.items()}
    families = sorted({r["family"] for r in records})
    for family in families:
        metrics[f"accuracy/{family}"] = float(np.mean([r["correct"] for r in records if record_family(r) == family]))
    metrics["eval_tasks"] = float(len(tasks))
    if env.max_turns > 1:
        metrics.update({k: v for k, v in episode_metrics(greedy).items() if k != "stop_frac"})
    return metrics, records
