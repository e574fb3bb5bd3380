"""Crafted metric histories for the detector tests: `steps(n, **series)` gives n step dicts whose
metric `key` follows `series[key]` (a constant, or a list of n values)."""

from __future__ import annotations

from reinforge.monitors import History


def steps(n: int, **series) -> list[dict]:
    out = [{} for _ in range(n)]
    for key, values in series.items():
        key = key.replace("__", "/")  # reward__correct__mean -> reward/correct/mean
        values = values if isinstance(values, list) else [values] * n
        assert len(values) == n, key
        for row, value in zip(out, values):
            row[key] = value
    return out


def history(rows: list[dict], evals: list[dict] | None = None) -> History:
    return History(rows, evals or [])
