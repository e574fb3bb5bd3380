"""Remove what sandbox calls of a dead process left behind: its cgroups and its temp directories.

A call removes its own cgroup directories and its `/tmp/reinforge-sandbox-<pid>-*` directory when
it ends; a host process SIGKILLed during a call never gets there, and nothing else ever would
(issue 31). Every such name carries the pid of the process that made it, so the next process that
starts the sandbox sweeps the names whose owner is gone. A name whose pid is alive is left alone,
even if the pid was reused by an unrelated process: a leftover kept is harmless, a live call's
directory removed is not.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

PREFIX = "reinforge-sandbox-"


def owner_pid(name: str) -> int | None:
    """The pid in `reinforge-sandbox-<pid>-<suffix>`, or None for any other name."""
    if not name.startswith(PREFIX):
        return None
    pid, dash, suffix = name[len(PREFIX):].partition("-")
    return int(pid) if pid.isdigit() and dash and suffix else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def orphans(directory: str) -> list[str]:
    """Paths under `directory` named by a sandbox whose owner process is gone."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in sorted(names):
        pid = owner_pid(name)
        if pid is not None and pid != os.getpid() and not _alive(pid):
            found.append(os.path.join(directory, name))
    return found


def _remove_cgroup(path: str) -> bool:
    """rmdir a cgroup, first killing what is still in it (an orphaned call's processes)."""
    deadline = time.monotonic() + 2
    while True:
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:  # EBUSY: processes inside, or a killed one not yet gone
            if time.monotonic() > deadline:
                return False
            try:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except (ProcessLookupError, PermissionError):
                            pass
            except OSError:
                return False
            time.sleep(0.01)


def sweep(temp_dir: str, cgroup_parents: tuple[str, ...]) -> list[str]:
    """Remove dead owners' leftovers (temp directories, then cgroups); return what was removed."""
    removed = []
    for path in orphans(temp_dir):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
            if not os.path.exists(path):
                removed.append(path)
    for parent in cgroup_parents:
        for path in orphans(parent):
            if _remove_cgroup(path):
                removed.append(path)
    return removed
