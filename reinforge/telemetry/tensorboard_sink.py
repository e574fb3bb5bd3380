"""TensorBoard event files, for watching curves live and comparing runs side by side.

When the event file cannot be written any more (the run directory made read-only, the disk
full), the sink says so in one line on stderr and stops writing; the run goes on. TensorBoard is
a view of the metrics, not their record: metrics.jsonl and the checkpoints are, and a failure to
write those stops the run with its own error. Stopping a run (and losing its compute) because
the view cannot be drawn would be the wrong trade; a raw traceback from the writer, the
previous behaviour, said neither what broke nor that the run was fine.
"""

from __future__ import annotations

import os
import sys
import threading
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

        _quiet_writer_threads()
        self.log_dir = Path(log_dir)
        self.disabled_by: OSError | None = None
        self._writer: SummaryWriter | None = None
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self._writer = SummaryWriter(log_dir=str(self.log_dir))
        except OSError as err:
            self._disable(err)

    def log(self, step: int, metrics: Mapping[str, Any], stage: str) -> None:
        if self.disabled_by is not None:
            return
        if self._writer is None:
            raise RuntimeError(f"TensorBoardSink({self.log_dir}) is closed")
        try:
            for name, value in metrics.items():
                self._writer.add_scalar(f"{stage}/{name}", to_float(value), global_step=int(step))
            # One flush per step (not per scalar): cheap, and a killed run keeps its curves.
            self._writer.flush()
        except OSError as err:
            self._disable(err)

    def close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except OSError as err:
                if self.disabled_by is None:
                    self._disable(err)

    def _disable(self, err: OSError) -> None:
        self.disabled_by = err
        why = f"{err.strerror or err}: {os.fsdecode(err.filename)}" if err.filename else str(err)
        print(f"reinforge: WARNING: TensorBoard curves stop here: cannot write {self.log_dir}: {why}; the run goes on "
              "(metrics.jsonl keeps every metric); set telemetry.tensorboard=false to go without them",
              file=sys.stderr, flush=True)
        if self._writer is not None:
            writer, self._writer = self._writer, None
            try:
                writer.close()
            except OSError:
                pass  # the same failure again: already said


_hook_lock = threading.Lock()
_hook_installed = False


def _quiet_writer_threads() -> None:
    """TensorBoard writes from a background thread, which dies printing its OSError as a raw
    traceback before the same error reaches the sink (on the next flush), which reports it in one
    line. Those threads' OSErrors are therefore not printed; every other thread's are, as before."""
    global _hook_installed
    with _hook_lock:
        if _hook_installed:
            return
        from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

        previous = threading.excepthook

        def hook(args: threading.ExceptHookArgs) -> None:
            if isinstance(args.thread, _AsyncWriterThread) and isinstance(args.exc_value, OSError):
                return
            previous(args)

        threading.excepthook = hook
        _hook_installed = True
