"""Weights & Biases in offline mode: a local `wandb/` folder, synced later with `wandb sync`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reinforge.telemetry.jsonl_sink import to_float


def wandb_available() -> bool:
    try:
        import wandb  # noqa: F401
    except ImportError:
        return False
    return True


class WandbSink:
    """Logs `{stage}/{name}` scalars with the stage's step as an explicit x-axis, so SFT and RL
    steps (both counted from zero) do not collide in W&B's single global step."""

    def __init__(self, run_dir: Path, config: Mapping[str, Any] | None = None) -> None:
        import wandb

        self._run = wandb.init(
            mode="offline", dir=str(run_dir), project="reinforge", name=Path(run_dir).name,
            config=dict(config or {}), reinit="create_new",
        )
        self._stages: set[str] = set()

    def log(self, step: int, metrics: Mapping[str, Any], stage: str) -> None:
        if stage not in self._stages:
            self._run.define_metric(f"{stage}/step")
            self._run.define_metric(f"{stage}/*", step_metric=f"{stage}/step")
            self._stages.add(stage)
        self._run.log({f"{stage}/step": step, **{f"{stage}/{k}": to_float(v) for k, v in metrics.items()}})

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None
