"""One background event loop for a foreign env whose methods are coroutines (verifiers).

Episodes are stepped from the rollout loop's threads; their coroutines all run on this loop, in
its own daemon thread, so async state the foreign env keeps (locks, clients, semaphores) lives on
one loop for the whole run, as it would under the env's own runner.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any


class BackgroundLoop:
    def __init__(self, name: str = "reinforge-env-loop"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> Future:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout_s: float | None = None) -> Any:
        return self.submit(coroutine).result(timeout_s)

    def call_soon(self, fn: Any, *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)
