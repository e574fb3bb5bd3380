"""Errors that end a run with a message instead of a traceback (importable without torch)."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be resumed from; the message names the file and the way out."""


class RunInterrupted(Exception):
    """SIGINT / SIGTERM stopped the run after a step (and its checkpoint)."""

    def __init__(self, signal_name: str, step: int, checkpoint: str | None):
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint
        if step == 0:
            message = f"stopped by {signal_name} during the warm-up (a resumed run repeats it)"
        else:
            where = f"checkpoint {checkpoint}" if checkpoint else "no checkpoint (trainer.checkpoint_every=0)"
            message = f"stopped by {signal_name} after RL step {step}; wrote {where}"
        super().__init__(message)
