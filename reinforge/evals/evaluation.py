"""Held-out evaluation: greedy accuracy, mean@k and pass@k, with the task's own verifier.

The one evaluation used everywhere: the training loop calls `evaluate` for its eval metrics and
`reinforge eval` calls it for its report (adding confidence intervals from the same records).
Multi-turn envs are evaluated on whole episodes, the final turn's answer checked by the verifier.

Verifier calls run where the training rewards run, under the same timeout
(`RewardScorer.verify_responses`): a hung or GIL-holding verifier is stopped, and a response
whose verification failed counts as not solved, is counted (`verify_errors`) and named in its record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import numpy as np

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.base import Env
from reinforge.tasks.answer_extraction import task_answer
from reinforge.rollout.episode_metrics import episode_metrics
from reinforge.rollout.episode_parts import agent_failed
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task
from reinforge.evals.eval_metrics import per_task_scores, record_family
from reinforge.evals.value_voting import voting_metrics


# (tasks, responses) -> a score or the RewardCallError of each verification, in order
BatchVerifier = Callable[[list[Task], list[str]], list["float | RewardCallError"]]


@contextlib.contextmanager
def verifier_pool(workers: int = 2, timeout_s: float = 10.0, isolation: str = "process") -> Iterator[BatchVerifier]:
    """A BatchVerifier of its own (worker processes, or threads), for a caller without a scorer
    (`reinforge eval`, `reinforge sft`): give it reward.workers / timeout_s / isolation."""
    from reinforge.rewards.process_pool import ProcessCallPool
    from reinforge.rewards.reward_calls import RewardCall
    from reinforge.rewards.thread_pool import ThreadCallPool

    pool = ProcessCallPool({}, workers, timeout_s) if isolation == "process" else ThreadCallPool({}, workers, timeout_s)
    try:
        yield lambda tasks, responses: pool.run([RewardCall("", "verify", (t, r)) for t, r in zip(tasks, responses)])
    finally:
        pool.close()


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
    verify: BatchVerifier | None = None,
    score_samples: Callable[[list], list[float]] | None = None,
) -> tuple[dict[str, float], list[dict]]:
    """Returns metrics and one record per task. `verify` checks the responses (the run's
    `scorer.verify_responses`); without it, worker processes with the default timeout do.

    Metrics: `accuracy` (greedy), `mean@{samples}` (fraction of the samples drawn at
    `temperature` that solve the task; also the unbiased pass@1), `pass@{samples}` when samples > 1
    (unbiased estimator, here: some sample solves it), `accuracy/{family}` per task family, `eval_tasks`, `no_answer` (the
    fraction of greedy responses in which the task's answer extractor found no answer: unsolved, but not a wrong answer), and
    for multi-turn envs the greedy episodes' tool use (`reinforge.rollout.episode_metrics`). Records hold the task id,
    prompt, answer, family, greedy response (and its turn-by-turn transcript when there are
    several turns), the answer extracted from it (`extracted`, None when there was none) and
    correctness, and the sampled responses with their correctness (`sample_correct`), which
    `eval_metrics.summarize` turns into CIs.

    Episodes run through the same rollout loop as training (one batched engine call per turn):
    greedy, then `samples` per task at `temperature`. A task counts as solved by a response when
    its verifier scores it 1.0 (partial credit, as some reasoning-gym scorers give, does not
    count as solved).

    `score_samples` (a value model: sampled trajectories -> one score each) adds `sample_values` to
    the records and majority / best-of-n / weighted voting metrics (reinforge.evals.value_voting).
    """
    if hasattr(env, "evaluate_games"):  # games: win / draw / loss against fixed opponents (reinforge.games.evaluation)
        return env.evaluate_games(engine, tasks, max_new_tokens, samples, temperature, seed, max_episode_tokens)
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
    # One record per episode: an agent episode that came as several pieces (gateway env) is its lead piece.
    greedy = [t for t in greedy if t.episode_part == 0]
    sampled = [t for t in sampled if t.episode_part == 0]
    # All verifications of the evaluation in one batch: greedy answers, then every sample.
    to_check = (
        list(tasks) + [task for task in tasks for _ in range(samples)],
        [g.response_text for g in greedy] + [t.response_text for t in sampled],
    )
    if verify is None:
        with verifier_pool() as own:
            checked = own(*to_check)
    else:
        checked = verify(*to_check)
    values = score_samples(sampled) if score_samples is not None and samples >= 2 else None
    solved = [not isinstance(c, BaseException) and c >= 1.0 for c in checked]
    errors = [str(c) if isinstance(c, BaseException) else None for c in checked]
    records = []
    for i, task in enumerate(tasks):
        response = greedy[i].response_text
        responses = [t.response_text for t in sampled[i * samples : (i + 1) * samples]]
        first = len(tasks) + i * samples
        record = {
            "task_id": task.id,
            "family": task_family(task),
            "prompt": task.prompt,
            "answer": task.answer,
            "greedy": response,
            "extracted": task_answer(task, response),
            "correct": solved[i],
            "samples": responses,
            "sample_correct": solved[first : first + samples],
        }
        if values is not None:
            record["sample_values"] = values[i * samples : (i + 1) * samples]
        failed = [e for e in [errors[i], *errors[first : first + samples]] if e]
        if failed:
            record["verify_errors"] = failed
        if greedy[i].transcript:
            record["turns"] = greedy[i].transcript
            record["finish_reason"] = greedy[i].finish_reason
        records.append(record)
    scores = per_task_scores(records, k_values=[samples])
    metrics = {name: float(values.mean()) for name, values in scores.items()}
    families = sorted({r["family"] for r in records})
    for family in families:
        metrics[f"accuracy/{family}"] = float(np.mean([r["correct"] for r in records if record_family(r) == family]))
    metrics.update(voting_metrics(records))
    metrics["eval_tasks"] = float(len(tasks))
    metrics["no_answer"] = float(np.mean([r["extracted"] is None for r in records])) if records else 0.0
    metrics["verify_errors"] = float(sum(e is not None for e in errors))
    if hasattr(env, "run_groups"):  # agent episodes without a result: counted, and not solved
        metrics["agent_failures"] = float(sum(agent_failed(t) for t in greedy + sampled))
    if env.max_turns > 1:
        metrics.update({k: v for k, v in episode_metrics(greedy, tools=hasattr(env, "registry")).items() if k != "stop_frac"})
    return metrics, records
