"""How the model resolvers (model_source, fetch, gguf_convert) tell the user what they are doing.

Its own module because the resolver calls the fetcher and the converter, and both report through
this: kept in model_source it made the three import each other."""

from __future__ import annotations

import sys
from collections.abc import Callable

Log = Callable[[str], None]


def progress(message: str) -> None:
    """Progress goes to stderr: stdout stays for what a command prints (a fetched directory, a YAML)."""
    print(f"reinforge: {message}", file=sys.stderr, flush=True)
