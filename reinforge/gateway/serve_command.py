"""`reinforge serve MODEL_DIR`: a local model as an OpenAI-compatible endpoint, for any agent.

Loads a Hugging Face model directory (reinforge.models.loading) into a TorchEngine and serves it
through the Gateway (plain endpoint: nothing is recorded) until Ctrl-C / SIGTERM. It binds only
to 127.0.0.1 and prints the base_url and the run's API key: point an agent's
`OpenAI(base_url=..., api_key=...)` at them. This is how the agent code of a recipe is tried
against a fixed model outside training.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import TextIO

from reinforge.gateway.server import Gateway


def serve(
    model_dir: str,
    port: int = 0,
    model_name: str | None = None,
    tool_format: str = "compact",
    max_new_tokens: int = 256,
    stop: threading.Event | None = None,
    on_ready: Callable[[Gateway], None] | None = None,
    out: TextIO = sys.stdout,
) -> int:
    """Serve `model_dir` until `stop` is set (or, when `stop` is None, until SIGINT / SIGTERM)."""
    from reinforge.engines.torch_engine import TorchEngine
    from reinforge.models.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(model_dir)
    engine = TorchEngine(model, tokenizer.pad_token_id)
    name = model_name or model_dir.rstrip("/").rsplit("/", 1)[-1]
    own_stop = stop is None
    stop = stop or threading.Event()
    previous = {}
    if own_stop and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        with Gateway(engine, tokenizer, model_name=name, tool_format=tool_format, max_new_tokens=max_new_tokens,
                     port=port) as gateway:
            print(f"serving {model_dir} as model {name!r}\n  base_url: {gateway.base_url}\n  api_key:  {gateway.api_key}\n"
                  "Ctrl-C stops it.", file=out, flush=True)
            if on_ready is not None:
                on_ready(gateway)
            while not stop.wait(0.5):
                pass
            stats = gateway.stats()
        print(f"stopped: {stats['requests']} requests, {stats['errors']} errors, "
              f"{stats['engine_calls']} engine calls", file=out, flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
