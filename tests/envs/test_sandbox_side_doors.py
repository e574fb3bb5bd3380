"""Issue 31's side doors of the sandbox's memory bound, each attacked with its host-side check.

Kernel memory that no process's PSS shows and that a cgroup v1 does not charge (TCP buffers), or
that no bound sees at all without a cgroup (SysV shared memory, unix-socket queues, inodes with
long names, xattrs), plus what a killed host process leaves behind and what the sandbox shows of
the host. Each attack runs under this machine's cgroup ("detected") and under the polled budget
(opted in with REINFORGE_SANDBOX_ALLOW_BUDGET=1; without it the budget is refused, tested here).
Each attack stops itself at a few hundred MB, so a door left open fails the test without taking
the machine down. Host-side measures: /proc/net/sockstat (TCP pages, global to all network
namespaces), /proc/meminfo Shmem (SysV segments, held after every process detached), the call's
tmpfs seen from the host, and the cgroup's own peak.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from deadlines import PROCESS_START_S, SHORT_PROGRAM_S
from sandbox_host import SHMEM_NOISE_MB, HostWatch, descendants

from reinforge.envs.tools import sandbox, sandbox_bounds, sandbox_leftovers, sandbox_supervisor
from reinforge.envs.tools.sandbox import SandboxUnavailableError, run_python, tmpfs_options

MEMORY_MB, DISK_MB = 96, 16
ATTACK_MB = 256  # what each attack tries to hold: well above the call's bound of 112 MB
TCP_NOISE_MB = 48  # other programs on the machine (a gateway, Ray) move the host's TCP memory too
REPOSITORY = str(Path(__file__).resolve().parents[2])


def attack(code: str, **limits):
    limits = {"memory_mb": MEMORY_MB, "disk_mb": DISK_MB, "timeout_s": SHORT_PROGRAM_S, **limits}
    with HostWatch() as watch:
        result = run_python(code, **limits)
    watch.check(result, limits["memory_mb"], limits["disk_mb"])
    return result


class HostPeak:
    """The largest growth of a host counter (bytes) while the block runs, sampled every 5 ms."""

    def __init__(self, read):
        self.read, self.peak_growth = read, 0

    def __enter__(self):
        self.before, self._stop = self.read(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_growth = max(self.peak_growth, self.read() - self.before)
            time.sleep(0.005)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_growth = max(self.peak_growth, self.read() - self.before)


def host_tcp_bytes() -> int:
    """TCP buffer memory of the whole host (every network namespace), from /proc/net/sockstat."""
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            fields = line.split()
            return int(fields[fields.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE")
    raise AssertionError("no TCP line in /proc/net/sockstat")


def host_shmem_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no Shmem in /proc/meminfo")


# ---- TCP on the sandbox's own loopback ----------------------------------------------------------

TCP_ATTACK = f"""
import errno, socket
held, results = 0, []
for family, address in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):
    try:
        server = socket.socket(family)
        server.bind((address, 0))
        server.listen(64)
        pairs = []
        while held < ({ATTACK_MB} << 20):
            client = socket.create_connection(server.getsockname()[:2])
            pairs.append((client, server.accept()[0]))  # accepted, never read
            client.setblocking(False)
            try:
                while held < ({ATTACK_MB} << 20):
                    held += client.send(b'x' * 65536)
            except BlockingIOError:
                pass
        results.append('HELD')
    except OSError as e:
        results.append(errno.errorcode.get(e.errno, str(e.errno)))
for kind in (socket.SOCK_DGRAM, socket.SOCK_RAW):
    try:
        socket.socket(socket.AF_INET, kind)
        results.append('MADE')
    except OSError as e:
        results.append(errno.errorcode.get(e.errno, str(e.errno)))
a, b = socket.socketpair()  # unix sockets stay: asyncio and multiprocessing need them
a.send(b'ok')
results.append(b.recv(2).decode())
print(held >> 20, *results)
"""


def test_tcp_on_the_sandboxs_loopback_holds_no_host_memory(mechanism) -> None:
    # issue 31: one call held 1,000 MB of host TCP buffers while its cgroup v1 peaked at 4 MB
    with HostPeak(host_tcp_bytes) as tcp:
        r = attack(TCP_ATTACK)
    assert r.ok, r.stderr
    assert r.stdout.split() == ["0", "EAFNOSUPPORT", "EAFNOSUPPORT", "EAFNOSUPPORT", "EAFNOSUPPORT", "ok"]
    assert tcp.peak_growth <= TCP_NOISE_MB << 20, f"host TCP memory grew {tcp.peak_growth >> 20} MB"


# ---- SysV IPC and POSIX message queues ----------------------------------------------------------

SYSV_ATTACK = f"""
import ctypes, errno, platform
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
arm = platform.machine() == 'aarch64'
IPC_PRIVATE, IPC_CREAT, SEGMENT = 0, 0o1000, 64 << 20
held, results = 0, []
while held < {ATTACK_MB}:  # touched, then detached: the IPC namespace holds them, no process does
    ident = libc.shmget(IPC_PRIVATE, ctypes.c_size_t(SEGMENT), IPC_CREAT | 0o600)
    if ident < 0:
        results.append('shmget ' + errno.errorcode[ctypes.get_errno()])
        break
    address = libc.shmat(ident, None, 0)
    ctypes.memset(address, 1, SEGMENT)
    libc.shmdt(ctypes.c_void_p(address))
    held += SEGMENT >> 20
for name, call in (('semget', lambda: libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o600)),
                   ('msgget', lambda: libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600)),
                   ('mq_open', lambda: libc.syscall(180 if arm else 240, b'/q', 0o100 | 2, 0o600, None))):
    ctypes.set_errno(0)
    results.append(name + ' ' + ('MADE' if call() >= 0 else errno.errorcode[ctypes.get_errno()]))
print(held, *results)
"""


def test_sysv_shared_memory_and_queues_cannot_be_made(mechanism) -> None:
    # issue 31: without a cgroup, SysV segments held 1,200 MB; detached, no process's PSS shows them
    with HostPeak(host_shmem_bytes) as shmem:
        r = attack(SYSV_ATTACK)
    assert r.ok, r.stderr
    assert r.stdout.split() == ["0", "shmget", "EPERM", "semget", "EPERM", "msgget", "EPERM", "mq_open", "EPERM"]
    assert shmem.peak_growth <= (DISK_MB + SHMEM_NOISE_MB) << 20, f"host Shmem grew {shmem.peak_growth >> 20} MB"


# ---- unix-socket queues -------------------------------------------------------------------------

UNIX_ATTACK = f"""
import os, socket, time
def stuff(limit_mb):
    queued, pairs = 0, []
    try:
        while queued < limit_mb << 20:
            a, b = socket.socketpair()
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 22)
            a.setblocking(False)
            try:
                while queued < limit_mb << 20:
                    queued += a.send(b'x' * 65536)
            except BlockingIOError:
                pass
            pairs.append((a, b))
    except OSError:  # out of descriptors
        pass
    os.write(1, f'queued {{queued >> 20}}\\n'.encode())
    time.sleep(1)
for _ in range(3):
    if os.fork() == 0:
        stuff({ATTACK_MB} // 4)
        os._exit(0)
stuff({ATTACK_MB} // 4)
for _ in range(3):
    os.wait()
"""


def test_unix_socket_queues_are_charged_to_the_call(mechanism) -> None:
    # issue 31: without a cgroup, unix-socket queues held 600 MB. Under a cgroup the kernel
    # charges them to the call; the budget cannot see them (so it is refused unless accepted).
    if mechanism == "budget":
        pytest.skip("the budget does not bound unix-socket queues: it is refused without the opt-in "
                    "(test_the_budget_is_refused_unless_accepted)")
    if not sandbox_bounds.detect()[0].kernel_enforced:
        pytest.skip("no cgroup can be made on this machine")
    r = attack(UNIX_ATTACK, max_processes=16)
    queued = sum(int(line.split()[1]) for line in r.stdout.splitlines() if line.startswith("queued"))
    assert queued < MEMORY_MB + DISK_MB, r.stdout  # the 4 x 64 MB the call asked for did not fit
    assert r.peak_memory_bytes <= (MEMORY_MB + DISK_MB) << 20
    assert "memory" in r.limits_hit, (r.stdout, r.error)


# ---- inodes and extended attributes -------------------------------------------------------------

FILES_ATTACK = """
import errno, os
def fill(make):
    made = 0
    try:
        while made < 200000:
            make(made)
            made += 1
    except OSError as e:
        return f'{made} {errno.errorcode[e.errno]}'
    return f'{made} none'
import shutil
open('target', 'w').close()
os.mkdir('links')
print(fill(lambda i: os.link('target', f'links/{i:0250d}')))  # names without inodes of their own
shutil.rmtree('links')
os.mkdir('files')
print(fill(lambda i: open(f'files/{i:0250d}', 'w').close()))  # empty files: only kernel memory
"""


def test_many_files_with_long_names_stop_at_the_inode_cap(mechanism) -> None:
    # issue 31: without a cgroup, 606k empty files with long names held 916 MB of kernel memory
    if os.geteuid() != 0:
        pytest.skip("the work tmpfs gets nr_inodes only when we mount it, as root (else a cgroup charges inodes)")
    cap = int(dict(option.split("=") for option in tmpfs_options(DISK_MB, 0).split(",") if "=" in option)["nr_inodes"])
    r = attack(FILES_ATTACK)
    assert r.ok, r.stderr
    (links, links_error), (files, files_error) = (line.split() for line in r.stdout.splitlines())
    assert links_error == "ENOSPC" and 0 < int(links) < cap, r.stdout  # a link takes an inode's place
    assert files_error == "ENOSPC" and 0 < int(files) < cap, r.stdout


XATTR_ATTACK = """
import errno, os
open('f', 'w').close()
for setter in (lambda: os.setxattr('f', 'user.x', b'x' * 65536),
               lambda: os.setxattr('f', 'user.x', b'x' * 65536, follow_symlinks=False),
               lambda: os.setxattr(os.open('f', os.O_RDONLY), 'user.x', b'x' * 65536)):
    try:
        setter()
        print('SET')
    except OSError as e:
        print(errno.errorcode[e.errno])
import shutil
shutil.copy2('f', 'g')  # copystat copies xattrs, and ignores EPERM
print(os.path.exists('g'))
"""


def test_extended_attributes_cannot_be_set(mechanism) -> None:
    # issue 31: without a cgroup, xattrs held 633 MB of kernel memory
    r = attack(XATTR_ATTACK)
    assert r.ok, r.stderr
    assert r.stdout.split() == ["EPERM", "EPERM", "EPERM", "True"]


# ---- the budget is refused unless accepted ------------------------------------------------------

def test_the_budget_is_refused_unless_accepted(monkeypatch) -> None:
    monkeypatch.setattr(sandbox_bounds, "detect", lambda: (sandbox_bounds.CallBounds, ()))
    monkeypatch.delenv(sandbox_bounds.BUDGET_OPT_IN, raising=False)
    real_popen = subprocess.Popen
    monkeypatch.setattr(sandbox_supervisor.subprocess, "Popen", lambda *a, **k: pytest.fail("ran under the budget unasked"))
    for start in (sandbox.check_sandbox, lambda: run_python("print(1)")):
        with pytest.raises(SandboxUnavailableError, match=f"no cgroup.*set {sandbox_bounds.BUDGET_OPT_IN}=1"):
            start()
    from reinforge.envs.tools.python_tool import python_tool
    with pytest.raises(SandboxUnavailableError, match=sandbox_bounds.BUDGET_OPT_IN):
        python_tool()  # a run using the tool fails when it is built, before any model is loaded
    monkeypatch.setattr(sandbox_supervisor.subprocess, "Popen", real_popen)
    monkeypatch.setenv(sandbox_bounds.BUDGET_OPT_IN, "1")
    r = run_python("print(1)")
    assert r.ok and r.bounds.startswith("budget")


# ---- what a SIGKILLed host process leaves behind ------------------------------------------------

def leftovers_of(pid: int) -> set[str]:
    prefix = f"{sandbox_leftovers.PREFIX}{pid}-"
    found = {os.path.join(tempfile.gettempdir(), n) for n in os.listdir(tempfile.gettempdir()) if n.startswith(prefix)}
    for parent in sandbox_bounds.detect()[1]:
        found |= {os.path.join(parent, n) for n in os.listdir(parent) if n.startswith(prefix)}
    return found


def python_process(code: str, budget: bool) -> subprocess.Popen:
    setup = ("from reinforge.envs.tools import sandbox, sandbox_bounds\n"
             + ("sandbox_bounds.detect = lambda: (sandbox_bounds.CallBounds, ())\n" if budget else ""))
    env = {**os.environ, "PYTHONPATH": REPOSITORY, sandbox_bounds.BUDGET_OPT_IN: "1"}
    return subprocess.Popen([sys.executable, "-c", setup + code], env=env, stdout=subprocess.DEVNULL)


def wait_for(condition, what: str, timeout_s: float = PROCESS_START_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_a_host_process_killed_mid_call_leaves_nothing_after_the_next_start(mechanism) -> None:
    budget = mechanism == "budget"
    host = python_process("sandbox.run_python(\"import subprocess\\nsubprocess.run(['/bin/sleep', '120'])\", "
                          "timeout_s=300, cpu_s=300)\n", budget)
    try:
        # the call is running once its program's child, `sleep`, is (the start-up check runs no sleep)
        wait_for(lambda: any(comm(p) == "sleep" for p in descendants(host.pid)), "the sandboxed sleep")
        host.send_signal(signal.SIGKILL)
        host.wait()
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    # what the kill leaves (the temp dir, as root; the call's cgroup in each hierarchy): the next
    # start must remove it
    expected = (os.geteuid() == 0) + len(sandbox_bounds.detect()[1])
    assert len(leftovers_of(host.pid)) == expected, leftovers_of(host.pid)
    # the next start of the sandbox, in a fresh process, sweeps what a dead owner left
    live = subprocess.Popen(["sleep", "60"])
    live_dir = tempfile.mkdtemp(prefix=f"{sandbox_leftovers.PREFIX}{live.pid}-")  # its owner lives: kept
    try:
        nxt = python_process("sandbox.check_sandbox()\n", budget)
        assert nxt.wait(timeout=PROCESS_START_S) == 0
        assert leftovers_of(host.pid) == set()
        assert os.path.isdir(live_dir)
    finally:
        live.kill()
        live.wait()
        os.rmdir(live_dir)


def test_owner_pids_are_read_from_the_names_only() -> None:
    assert sandbox_leftovers.owner_pid("reinforge-sandbox-123-ab12") == 123
    for name in ("reinforge-sandbox-123", "reinforge-sandbox-x-1", "other-123-ab", "reinforge-sandbox--1"):
        assert sandbox_leftovers.owner_pid(name) is None


# ---- what the sandbox sees of the host, and threads ---------------------------------------------

def test_host_memory_load_boot_id_and_local_tools_are_hidden() -> None:
    code = ("import os, errno, ctypes\n"
            "print(open('/proc/meminfo').readline().split()[1])\n"
            "print(open('/proc/loadavg').read().split()[0])\n"
            "print(open('/proc/sys/kernel/random/boot_id').read().strip())\n"
            "print(len(os.listdir('/usr/local/bin')) if os.path.isdir('/usr/local/bin') else 0)\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "print('inotify', 'MADE' if libc.inotify_init1(0) >= 0 else errno.errorcode[ctypes.get_errno()])\n")
    first, second = attack(code), attack(code)
    assert first.ok, first.stderr
    memory_kb, load, boot_id, local_tools, *inotify = first.stdout.split()
    assert int(memory_kb) == MEMORY_MB << 10  # the call's bound, not the host's memory
    assert load == "0.00"
    host_boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert boot_id != host_boot_id and boot_id != second.stdout.split()[2]
    if not os.path.realpath(sys.base_prefix).startswith("/usr/local"):
        assert local_tools == "0"
    assert inotify == ["inotify", "EPERM"]  # no watching when others open files under the shared /usr


def test_a_thread_pool_of_eight_works_at_the_default_limits() -> None:
    # issue 31: at the defaults only ~6 threads started (each reserved a 64 MB malloc arena)
    code = ("from concurrent.futures import ThreadPoolExecutor\nimport threading, time\n"
            "barrier = threading.Barrier(8, timeout=20)\n"
            "def work(i):\n    barrier.wait()\n    return i * i\n"
            "with ThreadPoolExecutor(8) as pool:\n    print(sum(pool.map(work, range(8))))\n")
    r = run_python(code, timeout_s=SHORT_PROGRAM_S)
    assert r.ok, r.stderr
    assert r.stdout.strip() == str(sum(i * i for i in range(8)))


def test_code_tests_pass_a_solution_that_uses_a_thread_pool() -> None:
    from reinforge.rewards.code_reward import run_tests
    from reinforge.tasks.task import Task
    solution = ("```python\nfrom concurrent.futures import ThreadPoolExecutor\nimport threading\n"
                "def squares(n):\n    barrier = threading.Barrier(8, timeout=20)\n"
                "    def work(i):\n        barrier.wait()\n        return i * i\n"
                "    with ThreadPoolExecutor(8) as pool:\n        return list(pool.map(work, range(n)))\n```")
    task = Task(id="squares", prompt="squares with 8 threads", answer="", verifier="exact",
                metadata={"tests": ["assert squares(8) == [i * i for i in range(8)]", "assert squares(16)[-1] == 225"]})
    assert run_tests(task, solution, timeout_s=SHORT_PROGRAM_S) == [True, True]


def test_code_tests_refuses_the_budget_when_the_reward_is_built(monkeypatch) -> None:
    from reinforge.rewards.builtin import build_component
    monkeypatch.setattr(sandbox_bounds, "detect", lambda: (sandbox_bounds.CallBounds, ()))
    monkeypatch.delenv(sandbox_bounds.BUDGET_OPT_IN, raising=False)
    for fn in ("code_tests", "code_tests_difficulty"):
        with pytest.raises(ValueError, match=f"code_tests: sandbox: no cgroup.*{sandbox_bounds.BUDGET_OPT_IN}=1"):
            build_component(fn, {})  # a config error before compute, not a failure on every sample
