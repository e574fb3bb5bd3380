"""Checks of command-line arguments that answer before torch is imported or a model loaded: options
that only mean something with another one, and `serve`'s port (which used to fail as a raw
RuntimeError after the model had loaded)."""

from __future__ import annotations

import argparse
import errno
import socket

from reinforge.config.schema import ConfigError


def check_resume_options(args: argparse.Namespace) -> None:
    """`--checkpoint` and `--force` only qualify a `--resume`; alone they were silently ignored."""
    if getattr(args, "resume", None):
        return
    if getattr(args, "checkpoint", None):
        raise ConfigError(
            f"--checkpoint {args.checkpoint} picks the checkpoint a resumed run continues from, and there is no --resume; "
            "add --resume RUN_DIR (the run that holds it), or drop --checkpoint to start a new run"
        )
    if getattr(args, "force", False):
        raise ConfigError("--force accepts config changes on a resumed run, and there is no --resume; add --resume RUN_DIR or drop --force")


def check_serve_port(port: int) -> None:
    """`port` (0: any free one) can be bound on 127.0.0.1 now, as the gateway binds it (no SO_REUSEADDR)."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port} is not a TCP port; give one in 1-65535, or --port 0 for a free one")
    if port == 0:
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as err:
        why = "is already in use" if err.errno == errno.EADDRINUSE else f"cannot be bound ({err.strerror})"
        raise ConfigError(f"port {port} on 127.0.0.1 {why}; pick another with --port N, or --port 0 for a free one") from None
    finally:
        sock.close()
