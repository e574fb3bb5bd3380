"""The host side of a sandbox attack: what one call took from the host while it ran, and left after.

`HostWatch` samples, every few milliseconds while the call runs, the memory of every process
below this test process (the sandbox is started by it, and everything inside the sandbox stays
below it: orphans are adopted by the sandbox's pid 1), as the sum of proportional set sizes
(pages shared after fork count once), plus the bytes used in the call's tmpfs (read through
/proc/PID/root of a process inside; where that cannot be read, the growth of the host's Shmem).
After the call it checks that no process of the call is left, no temporary directory and no
cgroup of the sandbox remain, and that the peak stayed within the call's bound plus a slack
(Shmem noise from other work on the machine; the budget's polling overshoot).

Not seen: kernel memory (pipe buffers, page tables), which a cgroup charges to the call and the
result's `peak_memory_bytes` reports; the pipe test checks that number instead.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time

from reinforge.envs.tools import sandbox_bounds
from reinforge.envs.tools.sandbox_supervisor import _children, _descendants, _processes_of as processes_of  # the sandbox's own walks
from reinforge.envs.tools.sandbox_bounds import _pss

SHMEM_NOISE_MB = 48  # where Shmem is the measure: other processes on the machine move it too
BUDGET_OVERSHOOT_MB = 96  # budget mode polls: a call can fault in this much between two polls


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (the sandbox's own walk, without `pid` itself)."""
    return _descendants(pid)[1:]


def _shmem() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1]) << 10
    raise AssertionError("no Shmem in /proc/meminfo")


def _sandbox_leftovers() -> set[str]:
    """Temporary directories and cgroups this process's sandbox calls made, as they are now.

    (Names carry the creating pid: other programs on the machine may be running sandboxes too.)
    """
    prefix = f"reinforge-sandbox-{os.getpid()}-"
    found = {os.path.join(tempfile.gettempdir(), name) for name in os.listdir(tempfile.gettempdir())
             if name.startswith(prefix)}
    _, args = sandbox_bounds.detect()
    for directory in args:
        found |= {os.path.join(directory, name) for name in os.listdir(directory) if name.startswith(prefix)}
    return found


def _tmpfs_used(pids: list[int]) -> int | None:
    """Bytes used in the call's writable tmpfs, seen through a process inside; None if unreadable."""
    for pid in pids:
        try:
            st = os.statvfs(f"/proc/{pid}/root/sandbox")
        except OSError:
            continue
        return (st.f_blocks - st.f_bfree) * st.f_frsize
    return None


class HostWatch:
    """with HostWatch() as watch: result = run_python(...); then watch.check(result, bound_mb)."""

    def __init__(self, interval_s: float = 0.005):
        self.interval_s = interval_s
        self.peak_process_bytes = 0
        self.peak_shmem_bytes = 0
        self.peak_processes = 0
        self._stop = threading.Event()

    def __enter__(self) -> "HostWatch":
        self._before = _sandbox_leftovers()
        self._earlier = set(descendants(os.getpid()))  # the test's own helpers, not the call's
        self._shmem_before = _shmem()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            pids = [p for p in descendants(me) if p not in self._earlier]
            self.peak_processes = max(self.peak_processes, len(pids))
            # Our direct child is the sandbox's launcher: between fork and exec it is a copy of
            # this (large) test process, whose shared pages PSS would charge to the call; after
            # exec it is bwrap, a megabyte or two. Everything the call runs is below it.
            direct = set(_children(me))
            inside = [p for p in pids if p not in direct]
            self.peak_process_bytes = max(self.peak_process_bytes, sum(_pss(p) for p in inside))
            tmpfs = _tmpfs_used(pids)
            if tmpfs is None and pids:
                tmpfs = _shmem() - self._shmem_before
            self.peak_shmem_bytes = max(self.peak_shmem_bytes, tmpfs or 0)
            time.sleep(self.interval_s)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def peak_mb(self) -> float:
        return (self.peak_process_bytes + self.peak_shmem_bytes) / 2**20

    def check(self, result, memory_mb: int, disk_mb: int) -> None:
        """Nothing of the call is left, and it held at most memory_mb + disk_mb of host memory."""
        assert set(descendants(os.getpid())) <= self._earlier, "a process of the call outlived it"
        if result.pid is not None:
            try:
                os.kill(result.pid, 0)
                raise AssertionError(f"the sandbox's bwrap {result.pid} is still there")
            except ProcessLookupError:
                pass
        if result.uid is not None:
            assert processes_of(result.uid) == [], "a process of the call's uid outlived it"
        assert _sandbox_leftovers() <= self._before, "the call left a temp dir or cgroup behind"
        slack = SHMEM_NOISE_MB + (0 if result.bounds.startswith("cgroup") else BUDGET_OVERSHOOT_MB)
        assert self.peak_mb <= memory_mb + disk_mb + slack, (
            f"the call held {self.peak_mb:.0f} MB of host memory (processes "
            f"{self.peak_process_bytes >> 20} MB + tmpfs {self.peak_shmem_bytes >> 20} MB), "
            f"bound {memory_mb} + {disk_mb} MB ({result.bounds})")
