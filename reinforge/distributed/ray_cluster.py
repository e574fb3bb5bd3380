"""Starting (or joining) the Ray cluster that serves rollout engines and reward workers.

`start_ray(None)` starts a local cluster that listens on loopback only:

- every Ray server (GCS, raylet, object manager, core workers, runtime-env agent) binds to the
  node IP, which is pinned to 127.0.0.1. Ray resolves `_node_ip_address="127.0.0.1"` back to the
  machine's routable address unless its "local only" switch is on (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`,
  the setting Ray itself uses on laptops), so that switch is set too;
- no dashboard (`include_dashboard=False`);
- token authentication on, with a fresh random token kept in this process's environment (which Ray's
  child processes inherit), so nothing is written to ~/.ray/auth_token; a token or mode the user
  set (`RAY_AUTH_MODE`, `RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH`) is kept as it is;
- no usage-stats reporting, and worker logs not echoed to the driver.

`start_ray("host:port" | "auto" | "ray://...")` joins an existing cluster as it is configured.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from typing import Any

INSTALL_HINT = "Ray is not installed: `pip install reinforge[ray]` (or `pip install 'ray>=2.40'`)"


class RayNotInstalledError(ImportError):
    pass


def ray_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def import_ray() -> Any:
    """The `ray` module, or a RayNotInstalledError that says how to install it."""
    try:
        import ray
    except ImportError as err:
        raise RayNotInstalledError(INSTALL_HINT) from err
    return ray


def _local_only_environment() -> None:
    """Environment of a loopback-only, token-authenticated local cluster; Ray's processes inherit it."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read by ray_constants at import time
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if not any(k in os.environ for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
        if "ray" in sys.modules:  # Ray caches its config (auth mode included) when imported
            try:
                from ray._raylet import Config

                Config.initialize("")
            except (ImportError, AttributeError):  # a Ray without token authentication (< 2.52)
                pass


def start_ray(address: str | None = None, num_cpus: int | None = None, log_to_driver: bool = False) -> None:
    """Connect this process to Ray: a new loopback-only local cluster when `address` is None, else
    the cluster at `address`. Does nothing when Ray is already initialized in this process."""
    ray = import_ray()
    if ray.is_initialized():
        return
    if address is None:
        _local_only_environment()
    common: dict[str, Any] = dict(logging_level=logging.WARNING, log_to_driver=log_to_driver, configure_logging=True)
    if address is not None:
        ray.init(address=address, **common)
        return
    # ray may have been imported before the environment was set: its constant is read at call time.
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False
    ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1", **common)


def stop_ray() -> None:
    """Disconnect (and stop the local cluster this process started); safe to call twice."""
    if ray_available():
        import ray

        if ray.is_initialized():
            ray.shutdown()
