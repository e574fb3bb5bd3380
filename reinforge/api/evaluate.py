"""`reinforge.evaluate`: `reinforge eval` from Python, returning the metrics.

    result = reinforge.evaluate("runs/my-run", samples=8)
    result.accuracy, result.metrics["mean@8"], result.summary["overall"]["pass@8"]
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reinforge.api.config import Overrides, override_items
from reinforge.api.parts import part_values


@dataclass(frozen=True)
class EvalResult:
    """`report` is what OUTPUT/eval.json holds: `metrics` (greedy `accuracy`, `mean@k`, `pass@k`,
    per-family accuracy), `overall` / `families` (each metric with its 95% bootstrap CI), the
    settings and the config source."""

    output_dir: Path
    report: dict[str, Any]

    @property
    def metrics(self) -> dict[str, float]:
        return self.report["metrics"]

    @property
    def accuracy(self) -> float:
        """Greedy accuracy on the held-out tasks."""
        return self.report["metrics"]["accuracy"]


def evaluate(
    model: str | os.PathLike,
    overrides: Overrides = (),
    *,
    recipe: str | os.PathLike | None = None,
    samples: int | None = None,
    tasks: Any = None,
    env: Any = None,
    env_params: Mapping[str, Any] | None = None,
    output_dir: str | os.PathLike | None = None,
    **sections: Any,
) -> EvalResult:
    """Score a saved model on held-out tasks: greedy accuracy, mean@k (= pass@1), pass@k, with CIs.

    model       a run directory (its `final` model is scored) or a Hugging Face model directory
    overrides   'key=value' strings or a dict, as for reinforge.train; keyword sections too
    recipe      the config to evaluate under; default: the run's own config.yaml (when the model
                is inside a run directory), else the default recipe
    samples     sampled completions per task (eval.samples)
    tasks, env, env_params   as for reinforge.train (pass them again for a run trained on
                Python objects that have no import path)
    output_dir  where eval.json, eval.md and eval_records.jsonl go (default runs/eval-<timestamp>)
    """
    from reinforge.run.eval_command import default_output_dir
    from reinforge.config.eval_config import eval_config

    model_dir = Path(model)
    if (model_dir / "config.yaml").is_file() and (model_dir / "final").is_dir():
        model_dir = model_dir / "final"  # a run directory: its trained policy
    values = part_values(None, env, env_params, tasks, None, None, None)
    if samples is not None:
        values["eval.samples"] = samples
    items = [*override_items(overrides, sections), *override_items(values)]
    chosen = eval_config(str(model_dir), None if recipe is None else os.fspath(recipe), items)

    from transformers.utils import logging as hf_logging

    from reinforge.run.eval_command import run_eval

    hf_logging.disable_progress_bar()
    out = Path(output_dir) if output_dir is not None else default_output_dir()
    report = run_eval(chosen.config, out, config_source=chosen.source)
    return EvalResult(out, report)
