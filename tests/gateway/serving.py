"""`reinforge serve` in a thread for a test: started, waited for, stopped and joined."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from reinforge.run.serve_command import serve


@dataclass
class Served:
    gateway: object = None
    out: io.StringIO = field(default_factory=io.StringIO)
    thread: threading.Thread | None = None


@contextmanager
def served(model_dir: str, max_new_tokens: int = 3, start_timeout_s: float = 60) -> Iterator[Served]:
    """The running server's gateway and its printed output; `thread` is joined (or still alive, for
    the test to assert on) after the block."""
    stop, ready, result = threading.Event(), [], Served()
    result.thread = threading.Thread(target=serve, kwargs=dict(model_dir=model_dir, max_new_tokens=max_new_tokens, stop=stop,
                                                               on_ready=ready.append, out=result.out))
    result.thread.start()
    try:
        deadline = time.monotonic() + start_timeout_s
        while not ready and result.thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        (result.gateway,) = ready
        yield result
    finally:
        stop.set()
        result.thread.join(30)
