"""Bounds on a whole sandbox call (all its processes together): a cgroup, else a polled budget.

Per-process rlimits do not bound a call: 20 forks under a 200 MB RLIMIT_AS hold 4 GB. So a call
gets, in this order of preference (detected once per process, at the first call):

- **cgroup v2**: a child of our own cgroup with `memory.max`, `memory.swap.max = 0` and
  `pids.max`; needs `memory` and `pids` delegated to our cgroup's children.
- **cgroup v1**: a child of our cgroup in the `memory` and `pids` hierarchies
  (`memory.limit_in_bytes`, `memory.memsw.limit_in_bytes` when swap accounting exists, `pids.max`).
- **budget** (no writable cgroup, e.g. an unprivileged CI container): the supervisor polls the
  call's processes every `POLL_S` and kills the call when the sum of their proportional set sizes
  (PSS, so pages shared after fork count once) exceeds the memory bound; the process count is
  bounded by RLIMIT_NPROC of the call's private uid. This bound is soft: between two polls the call
  can overshoot by what it can fault in within one interval (tens of MB on one core).
  It cannot see kernel memory held outside the call's processes and tmpfs, which a cgroup charges
  to the call: unix-socket queues (issue 31: 600 MB), pipe buffers beyond the per-user quota, page
  tables; without root, also the tmpfs's inodes. So the budget is REFUSED (the sandbox does not
  start) unless the user sets REINFORGE_SANDBOX_ALLOW_BUDGET=1, and then it warns once. (SysV IPC,
  POSIX message queues, extended attributes and non-unix sockets are denied by the seccomp filter
  in every mode, so no mode has to bound them.)

Either way the sandbox's only writable storage is one size-limited tmpfs (see sandbox.py), so
host memory for a call is at most `memory_mb + disk_mb`: under a cgroup the tmpfs pages are
charged to the call's cgroup (the limit is the sum), under the budget they are bounded by the
mount's size and the processes by the polled PSS.

The sandbox process joins the cgroup in `preexec_fn` (between fork and exec), so nothing of the
call ever runs outside it. After the call, `hits()` names the bounds the call ran into
(memory: an OOM kill or the budget; processes: fork refused at the limit). The budget knows the
process bound was hit only when a census (each poll, and one before a kill) found it full:
RLIMIT_NPROC refuses forks without telling anyone.
"""

from __future__ import annotations

import abc
import logging
import os
import secrets
import signal
import subprocess
import threading
import time

from reinforge.envs.tools.sandbox_leftovers import PREFIX as _PREFIX

POLL_S = 0.02
BUDGET_OPT_IN = "REINFORGE_SANDBOX_ALLOW_BUDGET"
log = logging.getLogger(__name__)


def cgroup_name() -> str:
    """A fresh cgroup name; it names our pid, so a look at the hierarchy tells whose it is."""
    return f"{_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _counter(text: str, key: str) -> int:
    """The value of `key N` in a flat-keyed cgroup file (memory.events, pids.events, oom_control)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return 0


def _cgroup_dirs(mountinfo: str = "/proc/self/mountinfo", membership: str = "/proc/self/cgroup") -> tuple[str | None, dict[str, str]]:
    """(our cgroup v2 directory or None, {v1 controller: our directory in its hierarchy}), from the
    mount table and this process's cgroup membership (parameters: so tests can hand in fake ones)."""
    mounts: list[tuple[str, str, str, set[str]]] = []  # (root, mount point, fstype, super options)
    with open(mountinfo) as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
                mounts.append((fields[3], fields[4], tail[0], set(tail[2].split(","))))
    v2_path, v1_paths = None, {}
    with open(membership) as f:
        for line in f:
            hierarchy, controllers, path = line.rstrip("\n").split(":", 2)
            if hierarchy == "0" and controllers == "":
                v2_path = path
            else:
                for controller in controllers.split(","):
                    v1_paths[controller] = path

    def locate(fstype: str, controller: str | None, path: str) -> str | None:
        for root, point, kind, options in mounts:
            if kind == fstype and (controller is None or controller in options):
                relative = path[len(root):] if root != "/" and path.startswith(root) else path
                directory = point + relative.rstrip("/") if relative != "/" else point
                if os.path.isdir(directory):
                    return directory
        return None

    v2 = locate("cgroup2", None, v2_path) if v2_path is not None else None
    v1 = {c: d for c in ("memory", "pids") if c in v1_paths and (d := locate("cgroup", c, v1_paths[c]))}
    return v2, v1


class CallBounds:
    """Whole-call memory/process bounds of one sandbox run (see the module docstring)."""

    mechanism = "budget"
    kernel_enforced = False  # True: a cgroup; False: the supervisor must call poll()

    def __init__(self, memory_bytes: int, max_processes: int):
        self.memory_bytes = memory_bytes
        self.max_processes = max_processes
        self.peak_bytes = 0  # largest total memory seen (cgroup peak, or the largest polled PSS sum)
        self._hit: list[str] = []

    def join(self) -> None:
        """In the child, before exec: put this process (and so all it starts) into the bound."""

    def poll(self, pids: list[int]) -> str | None:
        """While the call runs: the bound it just broke (the supervisor then kills it), else None."""
        total = sum(_pss(pid) for pid in pids)
        self.peak_bytes = max(self.peak_bytes, total)
        if total > self.memory_bytes:
            self._hit.append("memory")
            return "memory"
        if len(pids) >= self.max_processes and "processes" not in self._hit:
            self._hit.append("processes")
        return None

    def pids(self) -> list[int] | None:
        """Every process in the bound, or None when the bound does not know (budget mode)."""
        return None

    def kill_all(self) -> None:
        """SIGKILL every process in the bound (budget mode: the caller sweeps by uid instead)."""

    def hits(self) -> list[str]:
        """After the call: which bounds it ran into, in the order found."""
        return list(self._hit)

    def close(self) -> None:
        """Remove what `__init__` created; every process of the call must be gone."""

    def describe(self) -> str:
        return (f"budget: PSS of all processes <= {self.memory_bytes >> 20} MB polled every "
                f"{POLL_S * 1000:g} ms, RLIMIT_NPROC {self.max_processes}")


def _pss(pid: int) -> int:
    """Proportional set size of `pid` in bytes (its resident size where smaps is unreadable)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError):
        pass
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0  # exited between listing and reading


class _CgroupBounds(CallBounds, abc.ABC):
    """Common part: a set of freshly made cgroup directories the child joins; each cgroup version
    writes its own limit files (`_configure`)."""

    kernel_enforced = True

    def __init__(self, memory_bytes: int, max_processes: int, dirs: list[str]):
        super().__init__(memory_bytes, max_processes)
        self.dirs: list[str] = []
        try:
            for directory in dirs:
                os.mkdir(directory, 0o755)
                self.dirs.append(directory)
            self._configure()
        except OSError:
            self.close()
            raise

    @abc.abstractmethod
    def _configure(self) -> None:
        """Write the memory and process limits into `self.dirs`."""

    def join(self) -> None:
        pid = str(os.getpid()).encode()
        for directory in self.dirs:
            fd = os.open(os.path.join(directory, "cgroup.procs"), os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def poll(self, pids: list[int]) -> str | None:
        return None  # the kernel enforces the limits

    def pids(self) -> list[int]:
        found: set[int] = set()
        for directory in self.dirs:
            try:
                found.update(int(p) for p in _read(os.path.join(directory, "cgroup.procs")).split())
            except OSError:
                pass
        return sorted(found)

    def kill_all(self) -> None:
        for _ in range(10):  # a process may fork between our read and our kill: read again
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                _kill(pid)

    def close(self) -> None:
        deadline = time.monotonic() + 2
        for directory in reversed(self.dirs):
            while True:
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: a killed process not yet fully gone
                    if time.monotonic() > deadline:
                        break
                    self.kill_all()
                    time.sleep(0.01)
        self.dirs = []


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


class CgroupV1Bounds(_CgroupBounds):
    mechanism = "cgroup v1"

    def __init__(self, memory_bytes: int, max_processes: int, memory_dir: str, pids_dir: str):
        name = cgroup_name()
        self.memory_dir = os.path.join(memory_dir, name)
        self.pids_dir = os.path.join(pids_dir, name)
        super().__init__(memory_bytes, max_processes, [self.memory_dir, self.pids_dir])

    def _configure(self) -> None:
        _write(os.path.join(self.memory_dir, "memory.limit_in_bytes"), str(self.memory_bytes))
        memsw = os.path.join(self.memory_dir, "memory.memsw.limit_in_bytes")
        if os.path.exists(memsw):  # swap accounting on: memory + swap together, so no swapping out
            _write(memsw, str(self.memory_bytes))
        tcp = os.path.join(self.memory_dir, "memory.kmem.tcp.limit_in_bytes")
        if os.path.exists(tcp):  # v1 charges TCP buffers only once a limit is set (none may be made: seccomp)
            _write(tcp, str(self.memory_bytes))
        _write(os.path.join(self.pids_dir, "pids.max"), str(self.max_processes))

    def hits(self) -> list[str]:
        found = []
        try:
            self.peak_bytes = int(_read(os.path.join(self.memory_dir, "memory.max_usage_in_bytes")))
            if _counter(_read(os.path.join(self.memory_dir, "memory.oom_control")), "oom_kill"):
                found.append("memory")
        except (OSError, ValueError):
            pass
        try:
            if _counter(_read(os.path.join(self.pids_dir, "pids.events")), "max"):
                found.append("processes")
        except OSError:
            pass
        return found

    def describe(self) -> str:
        return f"cgroup v1: memory.limit_in_bytes {self.memory_bytes >> 20} MB, pids.max {self.max_processes}"


class CgroupV2Bounds(_CgroupBounds):
    mechanism = "cgroup v2"

    def __init__(self, memory_bytes: int, max_processes: int, parent: str):
        self.dir = os.path.join(parent, cgroup_name())
        super().__init__(memory_bytes, max_processes, [self.dir])

    def _configure(self) -> None:
        _write(os.path.join(self.dir, "memory.max"), str(self.memory_bytes))
        swap = os.path.join(self.dir, "memory.swap.max")
        if os.path.exists(swap):
            _write(swap, "0")
        _write(os.path.join(self.dir, "pids.max"), str(self.max_processes))

    def kill_all(self) -> None:
        kill = os.path.join(self.dir, "cgroup.kill")
        if os.path.exists(kill):
            try:
                _write(kill, "1")  # kernel >= 5.14: kills every process in the cgroup at once
            except OSError:
                pass
        super().kill_all()

    def hits(self) -> list[str]:
        found = []
        try:
            peak = os.path.join(self.dir, "memory.peak")
            if os.path.exists(peak):
                self.peak_bytes = int(_read(peak))
            if _counter(_read(os.path.join(self.dir, "memory.events")), "oom_kill"):
                found.append("memory")
            if _counter(_read(os.path.join(self.dir, "pids.events")), "max"):
                found.append("processes")
        except (OSError, ValueError):
            pass
        return found

    def describe(self) -> str:
        return f"cgroup v2: memory.max {self.memory_bytes >> 20} MB, pids.max {self.max_processes}"


_detected: type[CallBounds] | None = None
_detected_args: tuple = ()
_detect_lock = threading.Lock()


def _probe(factory) -> bool:
    """Can a cgroup be made, limited and joined here? Tried once with a real child process."""
    try:
        bounds = factory(64 << 20, 8)
    except OSError:
        return False
    try:
        done = subprocess.run(["/bin/true"], preexec_fn=bounds.join, check=False, timeout=10,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return done.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        bounds.close()


def detect() -> tuple[type[CallBounds], tuple]:
    """(the bounds class this machine supports, its extra constructor arguments); cached."""
    global _detected, _detected_args
    with _detect_lock:
        if _detected is None:
            try:
                v2, v1 = _cgroup_dirs()
            except OSError:
                v2, v1 = None, {}
            _detected, _detected_args = choose(v2, v1)
        return _detected, _detected_args


def choose(v2: str | None, v1: dict[str, str]) -> tuple[type[CallBounds], tuple]:
    """The best bounds that work under these cgroup directories (see `_cgroup_dirs`): cgroup v2
    where memory and pids reach its children, else cgroup v1 with both controllers, else the
    budget; each cgroup kind only if a probe call can really make, limit and join one."""
    if v2 is not None and _v2_delegated(v2) and _probe(lambda m, p: CgroupV2Bounds(m, p, v2)):
        return CgroupV2Bounds, (v2,)
    if "memory" in v1 and "pids" in v1 and _probe(lambda m, p: CgroupV1Bounds(m, p, v1["memory"], v1["pids"])):
        return CgroupV1Bounds, (v1["memory"], v1["pids"])
    return CallBounds, ()


def _v2_delegated(directory: str) -> bool:
    """Do children of `directory` get the memory and pids controllers (enabling them if we may)?"""
    control = os.path.join(directory, "cgroup.subtree_control")
    try:
        enabled = set(_read(control).split())
        if {"memory", "pids"} <= enabled:
            return True
        available = set(_read(os.path.join(directory, "cgroup.controllers")).split())
        if not {"memory", "pids"} <= available:
            return False
        _write(control, "+memory +pids")  # refused (EBUSY) when our own cgroup holds processes
        return {"memory", "pids"} <= set(_read(control).split())
    except OSError:
        return False


_budget_warned = False


def budget_refusal() -> str | None:
    """Why the budget may not bound a call here (None: the user opted in; warned once, loudly)."""
    global _budget_warned
    if os.environ.get(BUDGET_OPT_IN) == "1":
        if not _budget_warned:
            _budget_warned = True
            log.warning("sandbox: no cgroup here, running model code under the polled budget because %s=1: "
                        "kernel memory of a call (unix-socket queues, pipe buffers, page tables) is NOT bounded",
                        BUDGET_OPT_IN)
        return None
    return ("sandbox: no cgroup can be made here (no cgroup v2 with the memory and pids controllers delegated "
            "to us, no writable cgroup v1 memory and pids hierarchies), and without one the kernel memory a call "
            "holds outside its processes cannot be bounded (unix-socket queues held 600 MB that way), so model "
            "code is not run. Run as root or in a delegated cgroup v2 subtree (systemd-run --scope -p Delegate=yes), "
            f"or set {BUDGET_OPT_IN}=1 to accept the polled budget, which bounds process memory and the tmpfs only")


def call_bounds(memory_bytes: int, storage_bytes: int, max_processes: int) -> CallBounds:
    """Fresh bounds for one call, of the best kind this machine supports.

    A cgroup is charged for the call's tmpfs pages too, so its limit is memory + storage; the
    budget polls process memory only (PSS does not include tmpfs), the mount's size bounds the rest.
    """
    kind, args = detect()
    if kind is not CallBounds:
        try:
            return kind(memory_bytes + storage_bytes, max_processes, *args)
        except OSError:  # e.g. the cgroup hierarchy went read-only: still bounded, by the budget
            pass
    return CallBounds(memory_bytes, max_processes)
