"""Watching one sandbox call to its end: feed stdin, read stdout/stderr under a cap, enforce the
wall clock and (budget mode) the polled memory bound, kill the whole call when it must stop, and
say why it stopped (`SandboxResult.error`, `limits_hit`). How the call is confined is sandbox.py's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from reinforge.envs.tools import sandbox_bounds

_READ_CHUNK = 65536


@dataclass
class SandboxResult:
    ok: bool  # exited with 0, in time, within the output limit
    exit_code: int | None  # negative: killed by that signal; None: never started
    stdout: str
    stderr: str
    timed_out: bool
    error: str | None  # why it did not run to completion (timeout, output limit, signal, which bound)
    pid: int | None = None  # host pid of the outer bwrap process
    uid: int | None = None  # host uid the sandboxed processes ran under
    bounds: str = ""  # the mechanism that bounded the whole call, with its limits
    limits_hit: list[str] = field(default_factory=list)  # "memory", "processes", "cpu", "wall-clock", "output"
    peak_memory_bytes: int = 0  # the call's largest total memory the bound saw (0 if unknown)


def _processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def process_count(uid: int) -> int:
    return len(_processes_of(uid))


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
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it (orphans inside the sandbox are adopted by its pid 1)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += _children(current)
    return found


def _kill_all(proc: subprocess.Popen, uid: int | None, bounds: sandbox_bounds.CallBounds) -> None:
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
    bounds.kill_all()  # everything in the call's cgroup
    if uid is not None and process_count(uid):
        # Last sweep: anything still running as the run's private uid. kill(-1) as that uid hits
        # exactly that uid's processes (and the sweeping shell itself).
        subprocess.run(["/bin/sh", "-c", "kill -9 -1"], user=uid, group=uid, extra_groups=[],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=5, check=False)


def supervise(cmd: list[str], uid: int | None, stdin: bytes, timeout_s: float, cpu_s: int, preexec,
               max_output_bytes: int, bounds: sandbox_bounds.CallBounds, pass_fds: list[int]) -> SandboxResult:
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={},
        start_new_session=True, preexec_fn=preexec, close_fds=True, pass_fds=pass_fds)
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
    timed_out = budget_broken = False
    polling = not bounds.kernel_enforced  # budget mode: the supervisor enforces the memory bound
    next_poll = time.monotonic() + sandbox_bounds.POLL_S
    while proc.poll() is None:
        now = time.monotonic()
        if overflow.is_set():
            break
        if now >= deadline:
            timed_out = True
            break
        if polling and now >= next_poll:
            next_poll = now + sandbox_bounds.POLL_S
            pids = _processes_of(uid) if uid is not None else _descendants(proc.pid)
            if bounds.poll(pids) is not None:
                budget_broken = True
                break
        time.sleep(0.005)
    abnormal = proc.poll() is None
    if abnormal:
        if polling and not budget_broken:
            # a last census before the kill: an overflow or timeout can come between two polls,
            # and the budget sees the process bound only in a census (RLIMIT_NPROC tells nobody)
            bounds.poll(_processes_of(uid) if uid is not None else _descendants(proc.pid))
        _kill_all(proc, uid, bounds)
    proc.wait()
    for t in threads[1:]:
        t.join(timeout=2)
    if any(t.is_alive() for t in threads[1:]):  # something still holds the pipes: sweep again
        _kill_all(proc, uid, bounds)
        for t in threads[1:]:
            t.join(timeout=2)
    proc.stdout.close()
    proc.stderr.close()

    code = proc.returncode
    hits = bounds.hits()
    error = None
    if timed_out:
        error = f"timed out after {timeout_s:g}s"
        hits.append("wall-clock")
    elif overflow.is_set():
        error = f"output exceeded {max_output_bytes} bytes"
        hits.append("output")
    elif budget_broken:
        error = f"killed: the call's memory bound was exceeded ({bounds.describe()})"
    else:
        signum = -code if code is not None and code < 0 else None
        if code is not None and code > 128 and code - 128 in signal.Signals._value2member_map_:
            signum = code - 128  # bwrap reports its command killed by signal N as exit 128 + N
        if signum is not None:
            error = f"killed by signal {signal.Signals(signum).name}"
            if "memory" in hits:
                error += f": the call's memory bound was reached ({bounds.describe()})"
            elif signum in (signal.SIGXCPU, signal.SIGKILL):
                # The program is the pid namespace's init: signals from inside the sandbox cannot
                # kill it, and we did not (no timeout, no overflow, no budget): a SIGKILL with no
                # memory bound hit is the kernel's, at RLIMIT_CPU (soft = hard: SIGKILL at once)
                hits.append("cpu")
                error += f" (the CPU time limit of {cpu_s}s per process)"
    if error is None and code not in (0, None) and {"memory", "processes"} & set(hits):
        # a process of the call was OOM-killed, or a fork refused, and the program then failed
        error = f"exited with code {code}"
        if "memory" in hits:
            error += f"; a process was killed at the call's memory bound ({bounds.describe()})"
    if error is not None and "processes" in hits:
        error += f"; the process bound was reached, forks were refused ({bounds.describe()})"
    ok = code == 0 and error is None
    return SandboxResult(ok=ok, exit_code=code, stdout=out.decode("utf-8", "replace"),
                         stderr=err.decode("utf-8", "replace"), timed_out=timed_out, error=error,
                         pid=proc.pid, uid=uid, bounds=bounds.describe(), limits_hit=hits,
                         peak_memory_bytes=bounds.peak_bytes)
