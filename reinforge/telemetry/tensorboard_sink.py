"""TensorBoard event files, for watching curves live and comparing runs side by side."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reinforge.telemetry.jsonl_sink import to_float


class TensorBoardSink:
    """Writes each metric as a scalar under the tag `"{stage}/{name}"` (e.g. `rl/reward`).

    The stage prefix keeps SFT and RL curves in separate TensorBoard sections even though both
    count steps from zero.
    """

    def __init__(self, log_dir: str | Path) -> None:
        # Imported here: it pulls in the tensorboard package, which runs without it never need.
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer: SummaryWriter | None = SummaryWriter(log_dir=str(self.log_dir))

    def log(self, step: int, metrics: Mapping[str, Any], stage: str) -> None:
        if self._writer is None:
            raise RuntimeError(f"TensorBoardSink({self.log_dir}) is closed")
        for name, value in metrics.items():
            self._writer.add_scalar(f"{stage}/{name}", to_float(value), global_step=int(step))
        # One flush per step (not per scalar): cheap, and a killed run keeps its curves.
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
