"""What the prompt-value models take from a step's outcomes: each policy's seats' predictions made
before sampling are scored (value/brier against the batch mean's, the reliability curve), then its
model trains on them (reinforge.values.value_model). Returns the value/* metrics."""

from __future__ import annotations

import time

import torch

from reinforge.values.calibration import brier_score, reliability_counts, reliability_curve_by_bin
from reinforge.values.pending_predictions import Prediction
from reinforge.values.value_model import PromptValueModel

RELIABILITY_BINS = 10


def empty_reliability() -> torch.Tensor:
    return torch.zeros(RELIABILITY_BINS, 3, dtype=torch.float64)


def learn_outcomes(
    values: dict[str, PromptValueModel], reliabilities: dict[str, torch.Tensor], prefixes: dict[str, str],
    outcomes: dict[tuple[int, str], list[float]], predictions: dict[tuple[int, str], Prediction], prior_var_floor: float,
) -> dict[str, float]:
    """Every policy's seats (`outcomes`: per (group, seat key), its samples' successes), its metrics
    under its prefix; `reliabilities` (per policy) count on in place."""
    metrics: dict[str, float] = {}
    for name, model in values.items():
        mine = [(predictions[unit], seat) for unit, seat in outcomes.items() if predictions[unit][3] == name]
        if mine:
            metrics.update({prefixes[name] + k: v for k, v in learn_policy(model, reliabilities[name], mine, prior_var_floor).items()})
    return metrics


def learn_policy(
    model: PromptValueModel, reliability: torch.Tensor, units: list[tuple[Prediction, list[float]]], prior_var_floor: float,
) -> dict[str, float]:
    """One policy's seats: score the predictions made before sampling, then train on the outcomes."""
    entries = [entry for entry, _ in units]
    outcomes = [seat for _, seat in units]
    per_sample_pred = torch.tensor([e[2] for e, o in zip(entries, outcomes) for _ in o], dtype=torch.float64)
    per_sample_outcome = torch.tensor([y for o in outcomes for y in o], dtype=torch.float64)
    rates = torch.tensor([sum(o) / len(o) for o in outcomes], dtype=torch.float64)
    sizes = torch.tensor([len(o) for o in outcomes])
    reliability += reliability_counts(per_sample_pred, per_sample_outcome, RELIABILITY_BINS)
    constant = per_sample_outcome.mean().expand_as(per_sample_outcome)
    predictions = torch.tensor([e[2] for e in entries], dtype=torch.float64)
    metrics = {
        "value/brier": brier_score(per_sample_pred, per_sample_outcome),
        "value/brier_constant": brier_score(constant, per_sample_outcome),  # hindsight's batch mean: the bar to beat
        "value/pred_mean": per_sample_pred.mean().item(),
        "value/pass_rate": per_sample_outcome.mean().item(),
        "value/prior_var": model.prior_variance(prior_var_floor),
        "value/groups_observed": float(len(units)),  # (a game: its trained seats, each an outcome)
    }
    model.observe(torch.stack([e[0] for e in entries]), torch.stack([e[1] for e in entries]), predictions, rates, sizes)
    start = time.perf_counter()
    metrics["value/loss"] = model.fit()
    metrics["value/train_seconds"] = time.perf_counter() - start
    for k, (p, y, n) in enumerate(reliability_curve_by_bin(reliability)):
        if n:
            metrics[f"value/reliability/pred_{k}"], metrics[f"value/reliability/obs_{k}"] = p, y
            metrics[f"value/reliability/n_{k}"] = float(n)
    return metrics
