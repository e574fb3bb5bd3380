"""How well predicted pass rates match what the policy then did: Brier score and reliability curve.

Brier score (Brier 1950): mean over samples of (p_hat - y)^2, with y in [0, 1] the sample's success
and p_hat the pass rate predicted for its prompt before sampling. It is compared with the Brier score
of a constant prediction (the batch's own pass rate, which knows the answer in hindsight): a value
model that tells prompts apart scores below it.

Reliability curve (DeGroot & Fienberg 1983): predictions binned into equal-width bins of [0, 1]; per
bin, the mean prediction, the observed success rate and the number of samples. A calibrated model's
points lie on the diagonal.
"""

from __future__ import annotations

import torch


def brier_score(predicted: torch.Tensor, outcome: torch.Tensor) -> float:
    """Mean squared error of predicted probabilities [N] against outcomes [N] in [0, 1]."""
    if predicted.shape != outcome.shape or predicted.numel() == 0:
        raise ValueError(f"brier_score needs two non-empty tensors of one shape, got {tuple(predicted.shape)} and {tuple(outcome.shape)}")
    return (predicted.double() - outcome.double()).pow(2).mean().item()


def reliability_counts(predicted: torch.Tensor, outcome: torch.Tensor, bins: int = 10) -> torch.Tensor:
    """Per bin of the prediction, [bins, 3]: sum of predictions, sum of outcomes, count. Sums (not
    means) so that steps add up: the run's curve is the sum of its steps' counts."""
    index = (predicted.double() * bins).long().clamp(0, bins - 1)  # p = 1.0 falls in the last bin
    out = torch.zeros(bins, 3, dtype=torch.float64)
    out[:, 0].index_add_(0, index, predicted.double())
    out[:, 1].index_add_(0, index, outcome.double())
    out[:, 2].index_add_(0, index, torch.ones_like(predicted, dtype=torch.float64))
    return out


def reliability_curve(counts: torch.Tensor) -> list[tuple[float, float, int]]:
    """(mean prediction, observed rate, samples) of every non-empty bin of `reliability_counts`."""
    return [(p / n, y / n, int(n)) for p, y, n in counts.tolist() if n > 0]


def reliability_curve_by_bin(counts: torch.Tensor) -> list[tuple[float, float, int]]:
    """(mean prediction, observed rate, samples) per bin, (0, 0, 0) for an empty one."""
    return [(p / n, y / n, int(n)) if n > 0 else (0.0, 0.0, 0) for p, y, n in counts.tolist()]
