"""Run untrusted (model-written) Python code confined: the only way model code is executed.

Layers, outermost first:
- a fresh, unprivileged kernel uid/gid per run (as root, `setpriv` drops to it just before bwrap).
  RLIMIT_NPROC is counted per kernel uid and root is exempt from it, so the child must not be
  root; a uid of its own (not shared `nobody`) gives every run its own process budget, nothing
  else on the host counts against it, and nothing else on the host can be signalled by it.
  (`bwrap --uid` alone would not do: inside a user namespace created by root the kernel uid is
  still 0.) Without root we run as the caller's uid and raise the process limit by the caller's
  current process count.
- resource limits set in `preexec_fn`: CPU seconds, address space, processes, file size,
  open files, no core dumps. bwrap and everything it starts inherit them.
- bubblewrap: new user/pid/net/ipc/uts/cgroup namespaces (no network at all, not even
  loopback to the host), no nested user namespaces, a new session (no TIOCSTI), and a root
  filesystem that holds only: /usr (read-only), the Python installation (read-only, at
  /opt/python when it lives outside /usr, e.g. pyenv under /root), a minimal /dev, /proc of
  the sandbox's own pid namespace, a size-limited tmpfs /tmp and the run's work directory at
  /sandbox (read-write, the cwd, deleted afterwards). No /etc, /root, /home, /work.
- the interpreter runs isolated: `-I -S -B` (no env vars, no site, no user site, no .pyc).
- a wall-clock timeout; output read incrementally and capped; on timeout or overflow the whole
  sandbox is killed (bwrap's pid namespace dies with it, and every process of the run's uid is
  killed as a last sweep).

If bubblewrap is missing or cannot create its namespaces we raise `SandboxUnavailableError`:
we never fall back to running the code unconfined (DESIGN.md invariant 6).
"""

from __future__ import annotations

import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

SANDBOX_DIR = "/sandbox"  # the work directory, as the sandboxed code sees it
_PYTHON_MOUNT = "/opt/python"
_UID_RANGE = (1_000_000_000, 2_000_000_000)  # far above any uid in /etc/passwd or subuid maps
_READ_CHUNK = 65536


class SandboxUnavailableError(RuntimeError):
    """The sandbox cannot be set up here; the code was not run."""


@dataclass
class SandboxResult:
    ok: bool  # exited with 0, in time, within the output limit
    exit_code: int | None  # negative: killed by that signal; None: never started
    stdout: str
    stderr: str
    timed_out: bool
    error: str | None  # why it did not run to completion (timeout, output limit, signal)
    pid: int | None = None  # host pid of the outer bwrap process
    uid: int | None = None  # host uid the sandboxed processes ran under


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


# As root: bind the interpreter where the unprivileged uid can reach it (pyenv lives under /root,
# mode 700, which that uid cannot traverse, and bwrap resolves bind sources as the calling uid),
# in a private mount namespace that dies with the run, then drop to the run's uid and exec bwrap.
_ROOT_LAUNCHER = (
    'set -e; src=$1; dst=$2; id=$3; shift 3; '
    'if [ -n "$src" ]; then mount --bind "$src" "$dst"; mount -o remount,bind,ro "$dst"; fi; '
    'exec setpriv --reuid="$id" --regid="$id" --clear-groups -- "$@"'
)


def _process_count(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
            except OSError:
                pass
    return count


def _limits(cpu_s: int, memory_mb: int, nproc: int, max_file_mb: int):
    def apply() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_mb << 20, max_file_mb << 20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _reader(fd: int, limit: int, out: bytearray, overflow: threading.Event) -> None:
    """Read a pipe into `out`, never holding more than `limit` bytes; flag overflow and stop."""
    try:
        while True:
            chunk = os.read(fd, _READ_CHUNK)
            if not chunk:
                return
            room = limit - len(out)
            out += chunk[:room]
            if len(chunk) > room:
                overflow.set()
                return
    except OSError:
        return


def _writer(fd: int, data: bytes) -> None:
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view[:_READ_CHUNK]) :]
    except OSError:  # the child exited or closed stdin: it did not want the rest
        pass
    finally:
        os.close(fd)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _kill_all(proc: subprocess.Popen, uid: int | None) -> None:
    # Kill the sandbox's pid 1 (the interpreter, bwrap --as-pid-1) first: the kernel then kills
    # everything else in its pid namespace, and bwrap, still alive, reaps it and exits. Killing
    # bwrap first would orphan pid 1 to the host's init, which in a container may never reap it.
    for child in _children(proc.pid):
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if uid is not None and _process_count(uid):
        # Last sweep: anything still running as the run's private uid. kill(-1) as that uid hits
        # exactly that uid's processes (and the sweeping shell itself).
        subprocess.run(["/bin/sh", "-c", "kill -9 -1"], user=uid, group=uid, extra_groups=[],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=5, check=False)


def _bwrap_command(bwrap: str, python_dir: str | None, python: str, workdir: str, env: dict[str, str],
                   tmp_mb: int) -> list[str]:
    cmd = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
           "--new-session", "--as-pid-1", "--clearenv", "--hostname", "sandbox",
           "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + name
        if os.path.islink(host):
            cmd += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            cmd += ["--ro-bind", host, host]
    if python_dir is not None:
        cmd += ["--ro-bind", python_dir, _PYTHON_MOUNT]
    cmd += ["--dev", "/dev", "--proc", "/proc", "--size", str(tmp_mb << 20), "--tmpfs", "/tmp",
            "--bind", workdir, SANDBOX_DIR, "--chdir", SANDBOX_DIR]
    for key, value in env.items():
        cmd += ["--setenv", key, value]
    cmd += ["--", python, "-I", "-S", "-B", f"{SANDBOX_DIR}/main.py"]
    return cmd


_checked = False
_check_lock = threading.Lock()


def check_sandbox() -> None:
    """Raise SandboxUnavailableError unless a trivial program runs in the sandbox here."""
    global _checked
    with _check_lock:
        if _checked:
            return
        result = _run("print('ok')", stdin="", timeout_s=10, cpu_s=5, memory_mb=256,
                      max_processes=32, max_file_mb=1, max_output_bytes=4096)
        if not (result.ok and result.stdout.strip() == "ok"):
            raise SandboxUnavailableError(
                "sandbox: bubblewrap could not run a trivial program, refusing to run model code "
                f"unconfined: exit={result.exit_code} error={result.error} stderr={result.stderr.strip()[:500]!r}")
        _checked = True



def run_python(code: str, *, stdin: str = "", timeout_s: float = 5, cpu_s: int = 5, memory_mb: int = 256,
               max_processes: int = 32, max_file_mb: int = 8, max_output_bytes: int = 65536) -> SandboxResult:
    """Run `code` as a Python script in the sandbox; see the module docstring for the limits."""
    check_sandbox()
    return _run(code, stdin=stdin, timeout_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb,
                max_processes=max_processes, max_file_mb=max_file_mb, max_output_bytes=max_output_bytes)


def _run(code: str, *, stdin: str, timeout_s: float, cpu_s: int, memory_mb: int,
         max_processes: int, max_file_mb: int, max_output_bytes: int) -> SandboxResult:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailableError(
            "sandbox: bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap). "
            "Model code is never run unconfined.")
    prefix, python, env = _python_layout()
    root = os.geteuid() == 0
    if root:
        uid = gid = secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0]) + _UID_RANGE[0]
        nproc = max_processes
    else:  # cannot switch uid: the limit counts this user's other processes too
        uid = gid = None
        nproc = max_processes + _process_count(os.getuid())
    env = {"PATH": "/usr/bin:/bin", "HOME": SANDBOX_DIR, "LANG": "C.UTF-8", "TMPDIR": "/tmp", **env}

    base = tempfile.mkdtemp(prefix="reinforge-sandbox-")
    try:
        os.chmod(base, 0o755)
        workdir = os.path.join(base, "work")
        os.mkdir(workdir, 0o700)
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        python_dir = prefix
        if root:
            os.chown(workdir, uid, gid)
            os.chown(os.path.join(workdir, "main.py"), uid, gid)
            if prefix is not None:
                python_dir = os.path.join(base, "python")
                os.mkdir(python_dir, 0o755)
        cmd = _bwrap_command(bwrap, python_dir, python, workdir, env, tmp_mb=max(1, 2 * max_file_mb))
        if root:
            unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
            if unshare is None or setpriv is None:
                raise SandboxUnavailableError("sandbox: running as root needs util-linux unshare and setpriv")
            cmd = [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _ROOT_LAUNCHER,
                   "sh", prefix or "", python_dir or "", str(uid), *cmd]
        return _supervise(cmd, uid, gid, stdin.encode(), timeout_s,
                          _limits(cpu_s, memory_mb, nproc, max_file_mb), max_output_bytes)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _supervise(cmd: list[str], uid: int | None, gid: int | None, stdin: bytes,
               timeout_s: float, preexec, max_output_bytes: int) -> SandboxResult:
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={},
        start_new_session=True, preexec_fn=preexec, close_fds=True)
    out, err = bytearray(), bytearray()
    overflow = threading.Event()
    threads = [
        threading.Thread(target=_writer, args=(os.dup(proc.stdin.fileno()), stdin), daemon=True),
        threading.Thread(target=_reader, args=(proc.stdout.fileno(), max_output_bytes, out, overflow), daemon=True),
        threading.Thread(target=_reader, args=(proc.stderr.fileno(), max_output_bytes, err, overflow), daemon=True),
    ]
    proc.stdin.close()  # the writer thread owns its duplicate
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s
    timed_out = False
    while proc.poll() is None:
        if overflow.is_set():
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
        time.sleep(0.01)
    abnormal = proc.poll() is None
    if abnormal:
        _kill_all(proc, uid)
    proc.wait()
    for t in threads[1:]:
        t.join(timeout=2)
    if any(t.is_alive() for t in threads[1:]):  # something still holds the pipes: sweep again
        _kill_all(proc, uid)
        for t in threads[1:]:
            t.join(timeout=2)
    proc.stdout.close()
    proc.stderr.close()

    code = proc.returncode
    error = None
    if timed_out:
        error = f"timed out after {timeout_s:g}s"
    elif overflow.is_set():
        error = f"output exceeded {max_output_bytes} bytes"
    elif code is not None and code < 0:
        error = f"killed by signal {signal.Signals(-code).name}"
    elif code is not None and code > 128 and code - 128 in signal.Signals._value2member_map_:
        # bwrap reports its command killed by signal N (e.g. SIGKILL at RLIMIT_CPU) as exit 128 + N
        error = f"killed by signal {signal.Signals(code - 128).name}"
    ok = code == 0 and error is None
    return SandboxResult(ok=ok, exit_code=code, stdout=out.decode("utf-8", "replace"),
                         stderr=err.decode("utf-8", "replace"), timed_out=timed_out, error=error,
                         pid=proc.pid, uid=uid)
