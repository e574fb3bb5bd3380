"""Evaluation statistics: unbiased pass@k, percentile-bootstrap confidence intervals, summaries.

Pure functions over evaluation records (the dicts `reinforge.evals.evaluation.evaluate`
returns), so that the training loop's eval metrics and `reinforge eval`'s report are the same
numbers. A record needs `correct` (greedy answer solved), `sample_correct` (one bool per sampled
completion) and `family` (the task family; "all" when the source has none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

CI_LEVEL = 0.95


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k).

    The probability that at least one of k completions drawn without replacement from the n is
    correct (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1).
    Binomials overflow floats for large n, so it uses their product form:
        C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i).
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    stat: Callable[..., Any] = np.mean,
    resamples: int = 1000,
    alpha: float = 1 - CI_LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap (Efron 1979) (1 - alpha) interval of `stat` over `values`.

    Resamples the values (one per task) with replacement `resamples` times and returns the
    alpha/2 and 1 - alpha/2 quantiles of the statistic. Empty input gives (nan, nan); a
    single value gives a zero-width interval, honestly saying that one task tells nothing
    about spread.
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    resampled = data[rng.integers(0, data.size, size=(resamples, data.size))]
    if stat in (np.mean, np.median):  # vectorised over resamples
        estimates = stat(resampled, axis=1)
    else:
        estimates = np.array([stat(row) for row in resampled], dtype=float)
    low, high = np.quantile(estimates, [alpha / 2, 1 - alpha / 2])
    return (float(low), float(high))


def record_family(record: Mapping[str, Any]) -> str:
    return str(record.get("family", "all"))


def samples_per_task(records: Sequence[Mapping[str, Any]]) -> int:
    """The number of sampled completions per task; every record must have the same."""
    counts = {len(r["sample_correct"]) for r in records}
    if len(counts) > 1:
        raise ValueError(f"records have different numbers of samples per task: {sorted(counts)}")
    return counts.pop() if counts else 0


def per_task_scores(records: Sequence[Mapping[str, Any]], k_values: Iterable[int]) -> dict[str, np.ndarray]:
    """One score per task for each metric: `accuracy` (greedy solved, 0/1), `mean@n` (fraction
    of the n samples solved) and `pass@k` for each k in k_values with 2 <= k <= n. Every metric
    is the mean of its array over tasks, which is what the bootstrap resamples.

    pass@1 is not a separate metric: its unbiased estimate from n samples, 1 - C(n-c, 1) / C(n, 1)
    = c/n, is mean@n itself, so it would be the same column twice; mean@n is the one reported."""
    n = samples_per_task(records)
    scores = {"accuracy": np.array([float(bool(r["correct"])) for r in records])}
    if n == 0:
        return scores
    solved = [sum(bool(s) for s in r["sample_correct"]) for r in records]
    scores[f"mean@{n}"] = np.array([c / n for c in solved])
    for k in sorted({k for k in k_values if 2 <= k <= n}):
        scores[f"pass@{k}"] = np.array([pass_at_k(n, c, k) for c in solved])
    return scores


def _with_ci(scores: dict[str, np.ndarray], resamples: int, seed: int) -> dict[str, dict[str, float]]:
    out = {}
    for name, values in scores.items():
        low, high = bootstrap_ci(values, resamples=resamples, seed=seed)
        out[name] = {"value": float(values.mean()) if values.size else float("nan"), "ci_low": low, "ci_high": high}
    return out


def summarize(
    records: Sequence[Mapping[str, Any]],
    k_values: Iterable[int] | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Greedy accuracy, mean@n (which is pass@1) and pass@k (k in k_values, default 2..n), each
    with a 95% bootstrap CI over tasks, overall and per task family:

        {"tasks": 16, "samples": n, "ci_level": 0.95,
         "overall": {"accuracy": {"value", "ci_low", "ci_high"}, "mean@n": {...}, "pass@2": {...}, ...},
         "families": {"carry": {"tasks": 7, "metrics": {...same keys...}}, ...}}

    Families are listed in sorted order. Ks above n are dropped (pass@k needs k <= n samples), and
    k = 1 is mean@n (see per_task_scores).
    """
    n = samples_per_task(records)
    ks = sorted(set(range(2, n + 1) if k_values is None else k_values))
    by_family: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        by_family.setdefault(record_family(record), []).append(record)
    return {
        "tasks": len(records),
        "samples": n,
        "ci_level": CI_LEVEL,
        "overall": _with_ci(per_task_scores(records, ks), resamples, seed),
        "families": {
            family: {"tasks": len(group), "metrics": _with_ci(per_task_scores(group, ks), resamples, seed)}
            for family, group in sorted(by_family.items())
        },
    }
