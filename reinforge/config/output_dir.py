"""Is an output directory usable? Checked before any compute, so that `--output` naming a regular
file or a directory the user may not write is a one-line error, not an OSError after the model
and the tasks were built (or an hour into a run, from the first checkpoint)."""

from __future__ import annotations

import os
from pathlib import Path

from reinforge.config.schema import ConfigError


def check_output_dir(path: str | Path, name: str) -> None:
    """`path` is, or can be made, a directory this process writes into; `name` is what the user set
    (`--output`, `trainer.output_dir=`), for the message."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{name} {out} is a file, not a directory; give a directory path (a new one is created)")
    # The directory itself, or its nearest existing ancestor, which mkdir(parents=True) writes into.
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{name} {out} cannot be created: {existing} is a file, not a directory; give another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "is not writable" if existing == out else f"cannot be created: {existing} is not writable"
        raise ConfigError(f"{name} {out} {what} by this user; give a directory you may write (or fix its permissions)")
