"""Compatibility shim: the advantage registry lives in reinforge.algos.advantages now."""

from __future__ import annotations

from reinforge.algos.advantages import ADVANTAGE_ESTIMATORS, EstimatorSpec, get_estimator

__all__ = ["ADVANTAGE_ESTIMATORS", "EstimatorSpec", "get_estimator"]
