"""Evaluating a text-game policy: success rate, turns, illegal moves, how games ended.

Each held-out puzzle is played once greedily and `samples` times at the sampling temperature,
through the same rollout loop as training. A game counts as solved only when the game itself
says so (the env's `solved` counter), never from the last turn's text.

Metrics: `accuracy` (greedy success rate) and `mean@<samples>` / `pass@<samples>` (the sampled
games, as every evaluation names them, so the run summary and the report read them as usual);
`textgame/success` (= accuracy), `textgame/turns` (policy turns per greedy game),
`textgame/turns_solved` (per solved greedy game; nan when none), `textgame/moves` (legal moves),
`illegal_move_rate` (illegal attempts / attempts), `finish/<reason>` (stop = the game ended by
its rules, illegal_moves, max_turns, max_tokens, error). Records: one per puzzle, with the
solution, the greedy game turn by turn and the sampled games' results.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from reinforge.engines.base import Engine, SamplingParams
from reinforge.evals.eval_metrics import per_task_scores
from reinforge.rollout.episodes import rollout_groups
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

FINISH_REASONS = ("stop", "illegal_moves", "max_turns", "max_tokens", "error")


def solved(trajectory: Trajectory) -> bool:
    return trajectory.stats.get("solved", 0) > 0


def evaluate_text_games(env, engine: Engine, tasks: list[Task], max_new_tokens: int, samples: int, temperature: float,
                        seed: int, max_episode_tokens: int | None = None) -> tuple[dict[str, float], list[dict]]:
    stop = env.stop_token_ids
    greedy = rollout_groups(engine, env, tasks, 1, SamplingParams(max_new_tokens, 0.0, stop_token_ids=stop), None,
                            max_episode_tokens=max_episode_tokens)
    sampled = rollout_groups(engine, env, tasks, samples, SamplingParams(max_new_tokens, temperature, stop_token_ids=stop), seed,
                             max_episode_tokens=max_episode_tokens) if samples > 0 else []
    records = []
    for i, (task, game) in enumerate(zip(tasks, greedy)):
        mine = sampled[i * samples : (i + 1) * samples]
        records.append({
            "task_id": task.id,
            "family": str(task.metadata.get("family", "all")),
            "prompt": task.prompt,
            "answer": task.answer,
            "greedy": game.response_text,
            "correct": solved(game),
            "samples": [t.response_text for t in mine],
            "sample_correct": [solved(t) for t in mine],
            "turns": game.transcript,
            "finish_reason": game.finish_reason,
        })
    metrics = {name: float(values.mean()) for name, values in per_task_scores(records, k_values=[samples]).items()}
    attempts = sum(t.num_turns for t in greedy)
    wins = [t.num_turns for t in greedy if solved(t)]
    metrics["textgame/success"] = metrics["accuracy"]
    metrics["textgame/turns"] = attempts / len(greedy)
    metrics["textgame/turns_solved"] = float(np.mean(wins)) if wins else float("nan")
    metrics["textgame/moves"] = float(np.mean([t.stats.get("game_moves", 0) for t in greedy]))
    metrics["illegal_move_rate"] = sum(t.stats.get("illegal_moves", 0) for t in greedy) / max(attempts, 1)
    reasons = Counter(t.finish_reason for t in greedy)
    for reason in FINISH_REASONS:
        metrics[f"finish/{reason}"] = reasons[reason] / len(greedy)
    metrics["eval_tasks"] = float(len(tasks))
    return metrics, records
