"""Run untrusted (model-written) Python code confined: the only way model code is executed.

Layers, outermost first:
- a fresh, unprivileged kernel uid/gid per run (as root, `setpriv` drops to it just before bwrap).
  RLIMIT_NPROC is counted per kernel uid and root is exempt from it, so the child must not be
  root; a uid of its own (not shared `nobody`) gives every run its own process budget, nothing
  else on the host counts against it, and nothing else on the host can be signalled by it.
  (`bwrap --uid` alone would not do: inside a user namespace created by root the kernel uid is
  still 0.) Without root we run as the caller's uid and raise the process limit by the caller's
  current process count.
- whole-call bounds (`sandbox_bounds.py`): the call's processes together get `memory_mb` of
  memory and `max_processes` tasks, through a cgroup made for the call (v2 or v1) where one can
  be made, else a budget the supervisor enforces (polled PSS of all the call's processes,
  RLIMIT_NPROC of its private uid). Host memory for one call is at most `memory_mb + disk_mb`.
  The result names the mechanism (`bounds`) and the bounds the call ran into (`limits_hit`).
- per-process resource limits set in `preexec_fn`: CPU seconds, address space (one process
  alone cannot take more than the whole call may), processes, file size, open files, no core
  dumps, no POSIX message queues. bwrap and everything it starts inherit them.
- bubblewrap: new user/pid/net/ipc/uts/cgroup namespaces (no network at all, not even
  loopback to the host; bwrap brings the new namespace's own loopback up, so the seccomp filter
  refuses every socket family but AF_UNIX), no nested user namespaces, a new session (no TIOCSTI), and a root
  filesystem that holds only: /usr (read-only), the Python installation (read-only, at
  /opt/python when it lives outside /usr, e.g. pyenv under /root; as root through an overlay, so
  that /proc/self/mountinfo does not name its host path; the install's own files still name the
  prefix it was built for, e.g. sysconfig's build variables, which only a relocated copy would hide)
  with every site-packages /
  dist-packages directory covered by an empty read-only mount (the stdlib only: nothing the host
  pip-installed is importable), /dev with only null, zero, full, random and urandom, /proc of
  the sandbox's own pid namespace, and the work directory /sandbox (the cwd). The root and /dev
  are read-only; the ONLY writable storage is /sandbox, a tmpfs of `disk_mb` (/tmp and /dev/shm
  are symlinks into it), so nothing the code writes reaches the host's disk, its total size is
  capped, and it vanishes with the run. As root that tmpfs is mounted by us with `nr_inodes` too
  (bwrap cannot pass it): empty files with long names are kernel memory its size does not count
  (issue 31: 606k files held 916 MB), and on Linux >= 6.6 the inode cap also caps user xattrs.
  What the host is shows through less: /proc/meminfo shows the call's memory bound, /proc/loadavg
  an idle machine, the boot id is one of the call's own, and /usr/local/bin (the host's own tools)
  is an empty directory unless the interpreter lives there. No host path of ours is mounted writable, and
  /proc/self/mountinfo names no work directory (the code arrives through `bwrap --file`, from a
  memfd). No /etc, /root, /home, /work.
- a seccomp filter (`seccomp.py`, via `bwrap --seccomp`) denying with EPERM the syscalls a Python
  solution never needs: io_uring, keyrings, ptrace and cross-process memory, bpf, perf,
  userfaultfd, mount and namespace calls, modules, kexec, reboot, clocks, SysV IPC, message
  queues, xattrs, inotify; non-unix sockets; x32 and foreign ABIs too.
- the interpreter runs isolated: `-I -S -B` (no env vars, no site, no user site, no .pyc), with
  glibc's malloc arenas capped (MALLOC_ARENA_MAX): each thread's arena reserves 64 MB of address
  space, so under RLIMIT_AS = memory_mb only ~6 threads could start and a thread pool failed.
- a wall-clock timeout; output read incrementally and capped; on timeout, overflow or a broken
  budget the whole sandbox is killed (bwrap's pid namespace dies with it; every process of the
  call's cgroup, and of the run's uid, is killed as a last sweep).

If bubblewrap is missing or cannot create its namespaces, or there is no seccomp syscall table for
this architecture, or no cgroup can be made and the user did not accept the budget
(REINFORGE_SANDBOX_ALLOW_BUDGET=1, see sandbox_bounds.py), we raise `SandboxUnavailableError`: we
never fall back to running the code unconfined (DESIGN.md invariant 6). The first call of a process
sweeps the cgroups and temp directories of sandbox calls whose process was killed mid-call
(`sandbox_leftovers.py`).
"""

from __future__ import annotations

import functools
import glob
import os
import resource
import secrets
import shutil
import site
import sys
import tempfile
import threading
import uuid

from reinforge.envs.tools import sandbox_bounds, sandbox_leftovers, seccomp
from reinforge.envs.tools.sandbox_supervisor import SandboxResult, process_count, supervise

SANDBOX_DIR = "/sandbox"  # the work directory, as the sandboxed code sees it
_PYTHON_MOUNT = "/opt/python"
_STACK_BYTES = 8 << 20  # Linux's usual default, whatever the host's shell set
_UID_RANGE = (1_000_000_000, 2_000_000_000)  # far above any uid in /etc/passwd or subuid maps
_DEVICES = ("null", "zero", "full", "random", "urandom")
_INODES_PER_DISK_MB = 128  # files (and links) the tmpfs may hold per MB of its size: ~1.5 KB of kernel memory each
_MIN_INODES = 1024
_MALLOC_ARENA_MAX = "2"  # the main arena and one more, shared by all threads
_LOCAL_BIN = "/usr/local/bin"


class SandboxUnavailableError(RuntimeError):
    """The sandbox cannot be set up here; the code was not run."""




def _python_layout() -> tuple[str | None, str, dict[str, str]]:
    """(host prefix to mount at /opt/python or None when /usr has it, interpreter path inside, env)."""
    exe = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    if prefix == "/usr" or prefix.startswith("/usr/"):
        return None, exe, {}  # /usr is bound anyway
    if not exe.startswith(prefix + "/"):
        raise SandboxUnavailableError(f"sandbox: interpreter {exe} lies outside its prefix {prefix}")
    # libpython's RUNPATH names the host path, absent inside: point the loader at the new one.
    return prefix, _PYTHON_MOUNT + exe[len(prefix) :], {"LD_LIBRARY_PATH": _PYTHON_MOUNT + "/lib"}


@functools.lru_cache(maxsize=None)
def _hidden_package_dirs(prefix: str | None) -> tuple[str, ...]:
    """Sandbox paths of every third-party package directory of the mounted interpreters.

    `-S` keeps them off sys.path, but code can append them; an empty mount over each makes the
    stdlib all there is. (ensurepip's bundled wheels would also make pip importable.)
    """
    host = set(site.getsitepackages([sys.base_prefix]))
    for pattern in ("/usr/lib/python3*/*-packages", "/usr/local/lib/python3*/*-packages",
                    "/usr/lib/python3/dist-packages", sys.base_prefix + "/lib/python3*/ensurepip/_bundled"):
        host.update(glob.glob(pattern))
    inside = []
    for path in sorted(os.path.realpath(p) for p in host):
        if not os.path.isdir(path):
            continue
        if prefix is not None and path.startswith(prefix + "/"):
            inside.append(_PYTHON_MOUNT + path[len(prefix):])
        elif path.startswith("/usr/"):
            inside.append(path)
    return tuple(inside)


# As root: mount the interpreter where the unprivileged uid can reach it (pyenv lives under /root,
# mode 700, which that uid cannot traverse, and bwrap resolves bind sources as the calling uid),
# in a private mount namespace that dies with the run, mount the work tmpfs with the options bwrap
# cannot give (nr_inodes), owned by the run's uid, then drop to that uid and exec bwrap.
# The interpreter comes as a read-only overlay of one bind (`lower`) and an empty layer, not as a
# bind: /proc/self/mountinfo shows a bind's source path inside its filesystem (/root/.pyenv/...:
# the host's home and install path), an overlay's root is "/" and its lowerdir option the relative
# names given here. (Two lower layers: an overlay with no upper layer needs two.) Without overlayfs
# the bind serves, and the path shows.
_ROOT_LAUNCHER = (
    'set -e; src=$1; dst=$2; id=$3; work=$4; options=$5; shift 5; '
    'if [ -n "$src" ]; then cd "${dst%/*}"; mount --bind "$src" lower; '
    'mount -t overlay overlay -o lowerdir=lower:empty "$dst" 2>/dev/null'
    ' || { mount --bind "$src" "$dst"; mount -o remount,bind,ro "$dst"; }; cd /; fi; '
    'mount -t tmpfs -o "$options" tmpfs "$work"; '
    'exec setpriv --reuid="$id" --regid="$id" --clear-groups -- "$@"'
)


def tmpfs_options(disk_mb: int, uid: int) -> str:
    """Mount options of the call's work tmpfs (as root): its size and inode count, owned by the run's uid."""
    inodes = max(_MIN_INODES, disk_mb * _INODES_PER_DISK_MB)
    return f"size={disk_mb << 20},nr_inodes={inodes},mode=0700,uid={uid},gid={uid},nosuid,nodev"


def _proc_files(memory_mb: int) -> dict[str, bytes]:
    """What the sandbox reads instead of the host's memory, load and boot id."""
    kb = memory_mb << 10
    meminfo = "".join(f"{key}:{kb if key.startswith('Mem') else 0:>16} kB\n"
                      for key in ("MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SwapTotal", "SwapFree"))
    return {"/proc/meminfo": meminfo.encode(), "/proc/loadavg": b"0.00 0.00 0.00 1/1 1\n",
            "/proc/sys/kernel/random/boot_id": f"{uuid.uuid4()}\n".encode()}


def _limits(cpu_s: int, memory_mb: int, nproc: int, max_file_mb: int, bounds: sandbox_bounds.CallBounds):
    def apply() -> None:  # runs in the child between fork and exec
        bounds.join()
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        # every thread's stack is reserved at RLIMIT_STACK's size inside RLIMIT_AS: fix it, or a
        # host with a larger default (64 MB) leaves room for one thread where this one has ten
        resource.setrlimit(resource.RLIMIT_STACK, (_STACK_BYTES, _STACK_BYTES))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_mb << 20, max_file_mb << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # POSIX queues are kernel memory too

    return apply


def _bwrap_command(bwrap: str, python_dir: str | None, python: str, env: dict[str, str], disk_mb: int,
                   hidden: tuple[str, ...], code_fd: int, seccomp_fd: int, work: str | None = None,
                   proc_fds: dict[str, int] | None = None) -> list[str]:
    """bwrap's arguments; `work`: a tmpfs we mounted for /sandbox (else bwrap makes one of
    `disk_mb`); `proc_fds`: /proc files to show from these descriptors instead of the host's."""
    cmd = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
           "--new-session", "--as-pid-1", "--clearenv", "--hostname", "sandbox",
           "--seccomp", str(seccomp_fd), "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + name
        if os.path.islink(host):
            cmd += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            cmd += ["--ro-bind", host, host]
    if python_dir is not None:
        cmd += ["--ro-bind", python_dir, _PYTHON_MOUNT]
    for path in hidden:  # an empty, read-only directory over each site-packages
        cmd += ["--size", "4096", "--tmpfs", path, "--remount-ro", path]
    local_bin = os.path.realpath(_LOCAL_BIN)
    if os.path.isdir(local_bin) and not os.path.realpath(python_dir or python).startswith(local_bin + "/"):
        cmd += ["--size", "4096", "--tmpfs", _LOCAL_BIN, "--remount-ro", _LOCAL_BIN]
    cmd += ["--proc", "/proc"]
    for path, fd in (proc_fds or {}).items():
        cmd += ["--ro-bind-data", str(fd), path]
    cmd += ["--dir", "/dev"]
    for name in _DEVICES:
        cmd += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        cmd += ["--symlink", f"/proc/self/fd/{number}", f"/dev/{name}"]
    # The one writable mount, size-capped; /tmp and /dev/shm live inside it, so one cap covers all.
    cmd += ["--bind", work, SANDBOX_DIR] if work is not None else ["--size", str(disk_mb << 20), "--tmpfs", SANDBOX_DIR]
    cmd += ["--dir", f"{SANDBOX_DIR}/.tmp", "--dir", f"{SANDBOX_DIR}/.shm",
            "--symlink", "/proc/self/fd", "/dev/fd", "--symlink", f"{SANDBOX_DIR}/.shm", "/dev/shm",
            "--symlink", f"{SANDBOX_DIR}/.tmp", "/tmp",
            "--file", str(code_fd), f"{SANDBOX_DIR}/main.py", "--chdir", SANDBOX_DIR,
            "--remount-ro", "/"]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    cmd += ["--", python, "-I", "-S", "-B", f"{SANDBOX_DIR}/main.py"]
    return cmd


_checked = False
_check_lock = threading.Lock()


def sweep_leftovers() -> list[str]:
    """Remove the cgroups and temp directories of sandbox calls whose process died mid-call."""
    return sandbox_leftovers.sweep(tempfile.gettempdir(), sandbox_bounds.detect()[1])


def check_sandbox() -> None:
    """Raise SandboxUnavailableError unless a trivial program runs in the sandbox here.

    The first check of a process also sweeps what killed processes' calls left behind. A machine
    where only the budget can bound a call is refused unless the user accepted it (at every check:
    the setting may change; what is cached is the trivial program's success)."""
    global _checked
    kind, _ = sandbox_bounds.detect()
    if kind is sandbox_bounds.CallBounds and (refusal := sandbox_bounds.budget_refusal()) is not None:
        raise SandboxUnavailableError(refusal)
    with _check_lock:
        if _checked:
            return
        sweep_leftovers()
        result = _run("print('ok')", stdin="", timeout_s=10, cpu_s=5, memory_mb=256,
                      max_processes=32, max_file_mb=1, disk_mb=4, max_output_bytes=4096)
        if not (result.ok and result.stdout.strip() == "ok"):
            raise SandboxUnavailableError(
                "sandbox: bubblewrap could not run a trivial program, refusing to run model code "
                f"unconfined: exit={result.exit_code} error={result.error} stderr={result.stderr.strip()[:500]!r}")
        _checked = True


def run_python(code: str, *, stdin: str = "", timeout_s: float = 5, cpu_s: int = 5, memory_mb: int = 256,
               max_processes: int = 32, max_file_mb: int = 8, disk_mb: int = 32,
               max_output_bytes: int = 65536) -> SandboxResult:
    """Run `code` as a Python script in the sandbox; see the module docstring for the limits.

    memory_mb and max_processes bound the whole call (all its processes together); disk_mb is the
    size of its only writable storage (the work dir, /tmp and /dev/shm together); max_file_mb
    caps one file; cpu_s is per process, timeout_s the wall clock of the call.
    """
    check_sandbox()
    return _run(code, stdin=stdin, timeout_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb,
                max_processes=max_processes, max_file_mb=max_file_mb, disk_mb=disk_mb,
                max_output_bytes=max_output_bytes)


def _memfd(name: str, data: bytes) -> int:
    """An inheritable in-memory file holding `data`, positioned at its start (no host disk)."""
    fd = os.memfd_create(name, 0)  # no MFD_CLOEXEC: bwrap, three execs down, reads it
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _run(code: str, *, stdin: str, timeout_s: float, cpu_s: int, memory_mb: int,
         max_processes: int, max_file_mb: int, disk_mb: int, max_output_bytes: int) -> SandboxResult:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailableError(
            "sandbox: bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap). "
            "Model code is never run unconfined.")
    try:
        syscall_filter = seccomp.filter_program()
    except seccomp.SeccompUnsupportedError as err:
        raise SandboxUnavailableError(str(err)) from err
    prefix, python, env = _python_layout()
    root = os.geteuid() == 0
    if root:
        uid = secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0]) + _UID_RANGE[0]
        nproc = max_processes
    else:  # cannot switch uid: the limit counts this user's other processes too
        uid = None
        nproc = max_processes + process_count(os.getuid())
    env = {"PATH": "/usr/bin:/bin", "HOME": SANDBOX_DIR, "LANG": "C.UTF-8", "TMPDIR": "/tmp",
           "MALLOC_ARENA_MAX": _MALLOC_ARENA_MAX, **env}

    fds = [_memfd("main.py", code.encode("utf-8")), _memfd("seccomp", syscall_filter)]
    proc_fds = {path: _memfd(os.path.basename(path), data) for path, data in _proc_files(memory_mb).items()}
    fds += proc_fds.values()
    base = None
    bounds = None
    try:
        bounds = sandbox_bounds.call_bounds(memory_mb << 20, disk_mb << 20, max_processes)
        if not bounds.kernel_enforced and (refusal := sandbox_bounds.budget_refusal()) is not None:
            raise SandboxUnavailableError(refusal)
        python_dir, work = prefix, None
        if root:
            # empty mount points, nothing else: the interpreter's bind and the work tmpfs
            base = tempfile.mkdtemp(prefix=f"{sandbox_leftovers.PREFIX}{os.getpid()}-")
            os.chmod(base, 0o755)
            work = os.path.join(base, "work")
            os.mkdir(work, 0o755)
            if prefix is not None:  # the overlay's mount point and its two layers (see _ROOT_LAUNCHER)
                python_dir = os.path.join(base, "python")
                for name in ("python", "lower", "empty"):
                    os.mkdir(os.path.join(base, name), 0o755)
        cmd = _bwrap_command(bwrap, python_dir, python, env, disk_mb, _hidden_package_dirs(prefix), fds[0], fds[1],
                             work, proc_fds)
        if root:
            unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
            if unshare is None or setpriv is None:
                raise SandboxUnavailableError("sandbox: running as root needs util-linux unshare and setpriv")
            cmd = [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _ROOT_LAUNCHER,
                   "sh", prefix or "", python_dir or "", str(uid), work, tmpfs_options(disk_mb, uid), *cmd]
        if bounds.kernel_enforced:
            # a cgroup's pids.max is the bound; the rlimit stays as a backstop just above it, so
            # the cgroup is what refuses the fork and its counter tells us the bound was hit
            nproc += 4
        return supervise(cmd, uid, stdin.encode(), timeout_s, cpu_s,
                          _limits(cpu_s, memory_mb, nproc, max_file_mb, bounds), max_output_bytes, bounds, fds)
    finally:
        if bounds is not None:
            bounds.close()
        for fd in fds:
            os.close(fd)
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)
