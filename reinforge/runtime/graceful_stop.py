"""SIGINT / SIGTERM stop the loop at the end of the current step, after a checkpoint."""

from __future__ import annotations

import signal
import threading


class GracefulStop:
    """Context manager: a first signal asks the loop to stop; a second one stops at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        if self.requested is not None:  # asked twice: do not wait for the step to finish
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    def __enter__(self) -> GracefulStop:
        if threading.current_thread() is threading.main_thread():  # handlers only work there
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
