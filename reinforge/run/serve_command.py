"""`reinforge serve MODEL_DIR`: a local model as an OpenAI-compatible endpoint, for any agent.

Loads a Hugging Face model (a directory, Hub id, .gguf file or fetched name: reinforge.models.loading) into a TorchEngine and serves it
through the Gateway (plain endpoint: nothing is recorded) until Ctrl-C / SIGTERM. It binds only
to 127.0.0.1 and prints the base_url and the run's API key: point an agent's
`OpenAI(base_url=..., api_key=...)` at them. This is how the agent code of a recipe is tried
against a fixed model outside training.

It serves what the model was trained on: `/v1/completions` takes prompt text as the raw prompt
format encodes it (no chat template), `/v1/chat/completions` renders the chat template. When the
model was trained on raw prompts (its run's config.yaml, at or up to three levels above the model
directory, says rollout.prompt_format=raw, or auto with a tokenizer without a chat template) or
its tokenizer has no chat template at all (chat requests would get reinforge's fallback template),
chat requests get a format the model never saw: that is said at start and on every chat response.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import yaml

from reinforge.gateway.request_body import DEFAULT_MAX_BODY_BYTES
from reinforge.gateway.server import Gateway


def chat_format_warning(model_dir: str, tokenizer) -> str | None:
    """Why chat requests get a prompt format this model was not trained on; None when they do not."""
    from reinforge.config.eval_config import find_run_config  # reads YAML only, no model

    has_template = bool(getattr(tokenizer, "chat_template", None))
    run_config = find_run_config(model_dir) if Path(model_dir).is_dir() else None
    fix = "send its prompts as text to /v1/completions (the format it was trained on)"
    if run_config is not None:
        try:
            tree = yaml.safe_load(run_config.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            tree = {}
        rollout = tree.get("rollout") if isinstance(tree.get("rollout"), dict) else {}
        env = tree.get("env") if isinstance(tree.get("env"), dict) else {}
        requested = rollout.get("prompt_format", "auto")
        single_turn = env.get("type", "single_turn") == "single_turn"  # other envs refuse raw prompts
        if single_turn and (requested == "raw" or (requested == "auto" and not has_template)):
            how = "rollout.prompt_format=raw" if requested == "raw" else "rollout.prompt_format=auto, no chat template"
            return (f"this model was trained on raw prompts ({how} in {run_config}): /v1/chat/completions renders "
                    f"the chat template, which it never saw, and its answers there may be wrong; {fix}")
        return None
    if not has_template:
        return ("this model's tokenizer has no chat template: /v1/chat/completions renders reinforge's fallback "
                f"template, which the model was not trained on; {fix}")
    return None


def serve(
    model_dir: str,
    port: int = 0,
    model_name: str | None = None,
    tool_format: str = "compact",
    max_new_tokens: int = 256,
    stop: threading.Event | None = None,
    on_ready: Callable[[Gateway], None] | None = None,
    out: TextIO = sys.stdout,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> int:
    """Serve `model_dir` until `stop` is set (or, when `stop` is None, until SIGINT / SIGTERM)."""
    from reinforge.engines.torch_engine import TorchEngine
    from reinforge.models.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(model_dir)
    warning = chat_format_warning(model_dir, tokenizer)
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
                     port=port, chat_warning=warning, max_body_bytes=max_body_bytes) as gateway:
            print(f"serving {model_dir} as model {name!r}\n  base_url: {gateway.base_url}\n  api_key:  {gateway.api_key}\n"
                  "  routes:   /v1/completions (prompt text, no chat template), /v1/chat/completions (chat template)\n"
                  "Ctrl-C stops it.", file=out, flush=True)
            if warning is not None:  # on the serve command's own output, beside the base_url it prints
                print(f"WARNING: {warning}", file=out, flush=True)
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
