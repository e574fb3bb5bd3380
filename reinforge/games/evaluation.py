"""Evaluating a game policy: win / draw / loss against each fixed opponent, illegal moves, length.

Held-out tasks (task.source: game) are the policy against each evaluation opponent in each seat
(and the trainable players together, family "joint", where several policies play or the game is
cooperative). Each is played once greedily (the opponents' randomness fixed per task, so two evaluations meet
the same opponent play) and `samples` times at the sampling temperature.

Metrics, from the greedy games unless named `game_sampled/`:
- `game/vs-<opponent>/{win,draw,loss,unfinished}`: outcome rates; `.../win_draw`: not lost;
  `game/vs-<opponent>/as-<role>/win_draw`: the same for one seat;
- `illegal_move_rate`: the policy's illegal attempts over all its attempts; `game_length`: legal
  moves per game; `finish/<reason>` rates (stop = the game reached its end);
- `accuracy`: the not-lost rate over all greedy games, and `mean@<samples>` over all sampled ones
  (the names every evaluation reports, so the run summary and the report read them as usual);
  `game_sampled/vs-<opponent>/win_draw` per opponent;
- with several distinct policies, each policy's own: `policy/<name>/vs-<opponent>/...` (and
  `policy/<name>/joint/...`), `policy/<name>/accuracy`, `policy/<name>/illegal_move_rate`.
Every trainable seat of a game counts once (a joint game of two trainable seats counts twice).
- `rating/{mu,sigma,ordinal}`: with task.params.ratings and one trainable policy, the OpenSkill
  rating of this checkpoint from its greedy games, the fixed opponents as anchors (reinforge.games.ratings).
Records: one per task, the greedy game move by move (`game`) and the policy's own view (`turns`).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np

from reinforge.engines.base import Engine, SamplingParams
from reinforge.games.match import OUTCOMES
from reinforge.games.opponents import OPPONENTS
from reinforge.games.play import POLICY, GameRun
from reinforge.tasks.task import Task


def policy_seats(run: GameRun) -> list[int]:
    """The seats of the trainable policies (not of frozen pool members)."""
    return [seat for seat in run.streams if run.players[seat] in run.policies]


def policy_seat(run: GameRun) -> int:
    return policy_seats(run)[0]


def opponent_of(task: Task) -> str:
    trainable = task.metadata.get("policies", [POLICY])
    fixed = [who for who in task.metadata["seats"] if who not in trainable]
    return fixed[0] if fixed else "+".join(task.metadata["seats"])


def outcome_metrics(runs: list[GameRun], prefix: str, policy: str | None = None) -> dict[str, float]:
    """Outcome rates per family (and per family and seat) of the trainable seats, or of `policy`'s seats only."""
    by_family: dict[str, list[str]] = defaultdict(list)
    by_seat: dict[tuple[str, str], list[str]] = defaultdict(list)
    for run in runs:
        for seat in policy_seats(run):
            if policy is not None and run.players[seat] != policy:
                continue
            outcome = run.match.outcome(seat)
            family = run.task.metadata["family"]
            by_family[family].append(outcome)
            by_seat[(family, run.match.game.roles[seat])].append(outcome)
    metrics = {}
    for family, outcomes in by_family.items():
        counts = Counter(outcomes)
        for name in OUTCOMES:
            metrics[f"{prefix}/{family}/{name}"] = counts[name] / len(outcomes)
        metrics[f"{prefix}/{family}/win_draw"] = (counts["win"] + counts["draw"]) / len(outcomes)
    for (family, role), outcomes in by_seat.items():
        metrics[f"{prefix}/{family}/as-{role}/win_draw"] = sum(o in ("win", "draw") for o in outcomes) / len(outcomes)
    return metrics


def not_lost(run: GameRun, seat: int | None = None) -> bool:
    return run.match.outcome(policy_seat(run) if seat is None else seat) in ("win", "draw")


def seat_rates(runs: list[GameRun], policy: str | None = None) -> dict[str, float]:
    """Not-lost rate and illegal-move rate over the trainable seats (of `policy` only, if named)."""
    seats = [(run, seat) for run in runs for seat in policy_seats(run) if policy is None or run.players[seat] == policy]
    attempts = sum(sum(1 for m in run.match.log if m["player"] == seat) for run, seat in seats)
    illegal = sum(run.match.illegal[seat] for run, seat in seats)
    return {
        "accuracy": float(np.mean([not_lost(run, seat) for run, seat in seats])) if seats else float("nan"),
        "illegal_move_rate": illegal / max(attempts, 1),
    }


def evaluate_games(env, engine: Engine, tasks: list[Task], max_new_tokens: int, samples: int, temperature: float,
                   seed: int, max_episode_tokens: int | None = None) -> tuple[dict[str, float], list[dict]]:
    for task in tasks:
        if not any(who in task.metadata.get("policies", [POLICY]) for who in task.metadata["seats"]):
            raise ValueError(f"held-out game {task.id} seats no trainable policy: {task.metadata['seats']}")
    stop = env.stop_token_ids
    greedy, _ = env.play(engine, tasks, [1] * len(tasks), SamplingParams(max_new_tokens, 0.0, stop_token_ids=stop), None, 0,
                      max_episode_tokens, "eval")
    sampled = env.play(engine, tasks, [samples] * len(tasks), SamplingParams(max_new_tokens, temperature, stop_token_ids=stop),
                       seed, 0, max_episode_tokens, "eval-sampled")[0] if samples > 0 else []

    metrics = outcome_metrics(greedy, "game")
    if sampled:
        metrics.update({k: v for k, v in outcome_metrics(sampled, "game_sampled").items() if k.endswith("/win_draw")})
    rates = seat_rates(greedy)
    metrics["illegal_move_rate"] = rates["illegal_move_rate"]
    metrics["game_length"] = float(np.mean([run.match.moves for run in greedy]))
    reasons = Counter(run.match.finish_reason for run in greedy)
    for reason in ("stop", "illegal_moves", "max_turns", "max_tokens"):
        metrics[f"finish/{reason}"] = reasons[reason] / len(greedy)
    metrics["accuracy"] = rates["accuracy"]
    metrics[f"mean@{samples}"] = seat_rates(sampled)["accuracy"] if sampled else float("nan")
    metrics["eval_tasks"] = float(len(tasks))
    policies = list(tasks[0].metadata.get("policies", [POLICY])) if tasks else []
    for name in policies if len(policies) > 1 else []:
        metrics.update(outcome_metrics(greedy, f"policy/{name}", policy=name))
        metrics.update({f"policy/{name}/{key}": value for key, value in seat_rates(greedy, name).items()})
    if getattr(env, "ratings", False) and len(policies) == 1:
        # this checkpoint's rating against the fixed opponents (reinforge.games.ratings)
        for name in sorted({task.metadata["game"] for task in tasks}):
            runs = [run for run in greedy if run.match.game.name == name and opponent_of(run.task) in OPPONENTS]
            if not runs:
                continue
            anchors = sorted({opponent_of(run.task) for run in runs})
            table = env.checkpoint_ratings(runs[0].match.game, anchors)
            metrics.update(table.rate([(opponent_of(run.task), run.match.outcome(policy_seat(run))) for run in runs]))

    records = []
    for i, (task, run) in enumerate(zip(tasks, greedy)):
        seat = policy_seat(run)
        mine = sampled[i * samples : (i + 1) * samples]
        records.append({
            "task_id": task.id,
            "family": task.metadata["family"],
            "prompt": task.prompt,
            "answer": f"{run.match.game.roles[seat]} against {opponent_of(task)}",
            "greedy": run.streams[seat].last_text,
            "correct": not_lost(run),
            "outcome": run.match.outcome(seat),
            "samples": [r.match.outcome(seat) for r in mine],
            "sample_correct": [not_lost(r) for r in mine],
            "turns": run.streams[seat].transcript,
            "finish_reason": run.match.finish_reason,
            "game": run.record(),
        })
    return metrics, records
