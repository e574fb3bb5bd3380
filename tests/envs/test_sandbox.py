"""The Python sandbox: model code runs confined; every attack also checks the host side.

Each attack runs through `attack()`, which watches the host while the call runs (memory of all
the call's processes plus tmpfs growth, see tests/sandbox_host.py) and checks afterwards that
nothing is left (processes, temp dirs, cgroups) and that the call stayed within
memory_mb + disk_mb. Attacks on memory and processes run under both whole-call mechanisms: the
one this machine supports (a cgroup where one can be made) and the polled budget every machine has.
"""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import tempfile
import threading
import time
import uuid

import pytest
from deadlines import SHORT_PROGRAM_S
from sandbox_host import HostWatch, processes_of

from reinforge.envs.tools import sandbox, sandbox_supervisor
from reinforge.envs.tools.sandbox import SandboxUnavailableError, run_python

MEMORY_MB, DISK_MB = 96, 16  # small limits: attacks hit them fast


def attack(code: str, *, memory_mb: int = MEMORY_MB, disk_mb: int = DISK_MB, **limits):
    """Run `code` in the sandbox while watching the host; check the host side; return the result."""
    with HostWatch() as watch:
        result = run_python(code, memory_mb=memory_mb, disk_mb=disk_mb, **limits)
    watch.check(result, memory_mb, disk_mb)
    return result


def assert_nothing_left(result) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(result.pid, 0)  # reaped: no such process
    if result.uid is not None:  # running as root: every run has a uid of its own
        assert processes_of(result.uid) == []


def syscall_code(*calls: tuple[str, int, int]) -> str:
    """A program making raw syscalls by number (x86_64, aarch64) and printing `name errno-name`."""
    return ("import ctypes, errno, platform\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "arm = platform.machine() == 'aarch64'\n"
            f"for name, x86, a64 in {list(calls)!r}:\n"
            "    ctypes.set_errno(0)\n"
            "    r = libc.syscall(a64 if arm else x86, 0, 0, 0, 0, 0)\n"
            "    print(name, 'OK' if r >= 0 else errno.errorcode.get(ctypes.get_errno()))\n")


def test_normal_code_prints_output_and_reads_stdin() -> None:
    code = "import os, sys\nprint('hello', sum(range(10)), os.getcwd())\nprint(sys.stdin.read().upper())\n"
    r = run_python(code, stdin="abc")
    assert r.ok and r.exit_code == 0 and not r.timed_out and r.error is None
    assert r.stdout == "hello 45 /sandbox\nABC\n"
    assert r.bounds and r.limits_hit == []
    assert_nothing_left(r)


@pytest.fixture(params=["8 MB", "64 MB"])
def host_stack_limit(request):
    """The host shell's `ulimit -s`: 8 MB here, 64 MB on some CI machines (threads inside must not care)."""
    before = resource.getrlimit(resource.RLIMIT_STACK)
    wanted = int(request.param.split()[0]) << 20
    if before[1] != resource.RLIM_INFINITY and before[1] < wanted:
        pytest.skip(f"the hard stack limit here is below {request.param}")
    resource.setrlimit(resource.RLIMIT_STACK, (wanted, before[1]))
    yield
    resource.setrlimit(resource.RLIMIT_STACK, before)


def test_the_stdlib_works_inside(host_stack_limit) -> None:
    code = ("import multiprocessing as mp, tempfile, subprocess, json, sqlite3, os\n"
            "with mp.Pool(2) as pool:\n    print(pool.map(abs, [-1, -2]))\n"
            "with tempfile.NamedTemporaryFile() as f:\n    print(f.name.startswith('/tmp/'))\n"
            "print(subprocess.run(['echo', 'hi'], capture_output=True, text=True).stdout.strip())\n"
            "print(sqlite3.connect(':memory:').execute('select 1 + 1').fetchone()[0])\n")
    # At run_python's default memory (256 MB), not the attacks' 96: a Pool's three threads reserve
    # 8 MB stacks and try 64 MB malloc arenas, which took the interpreter's peak address space to
    # 92.5 MB of a 96 MB RLIMIT_AS here, so a slightly different layout failed "can't start new thread".
    r = attack(code, timeout_s=SHORT_PROGRAM_S, memory_mb=256)
    assert r.ok, r.stderr
    assert r.stdout.split("\n")[:4] == ["[1, 2]", "True", "hi", "2"]


def test_isolated_interpreter_and_unprivileged_uid() -> None:
    r = run_python("import os, sys\nprint(sys.flags.isolated, sys.flags.no_site, os.getuid() != 0, os.getgroups())")
    assert r.stdout.split() == ["1", "1", "True", "[]"] or r.stdout.strip() == "1 1 True []"
    if os.geteuid() == 0:
        assert r.uid not in (None, 0, 65534)


def test_error_exit_is_reported() -> None:
    r = run_python("raise SystemExit(3)")
    assert not r.ok and r.exit_code == 3
    r = run_python("1/0")
    assert not r.ok and "ZeroDivisionError" in r.stderr


# ---- time ---------------------------------------------------------------------------------------

def test_infinite_loop_times_out_and_leaves_nothing() -> None:
    start = time.monotonic()
    r = attack("while True:\n    pass\n", timeout_s=1, cpu_s=10)
    assert r.timed_out and not r.ok and "timed out" in r.error and "wall-clock" in r.limits_hit
    assert time.monotonic() - start < 1 + 10  # an infinite loop: any bound means it was stopped


def test_cpu_limit_kills_before_wall_clock() -> None:
    r = attack("while True:\n    pass\n", timeout_s=60, cpu_s=1)
    assert not r.ok and not r.timed_out and r.error is not None  # the CPU limit, not the wall clock
    assert "CPU time limit of 1s" in r.error and "cpu" in r.limits_hit


def test_the_program_cannot_be_killed_from_inside() -> None:
    # it is the pid namespace's init: which is why a SIGKILL of it names the CPU limit
    r = attack("import os, signal\nos.kill(1, signal.SIGKILL)\nos.kill(os.getpid(), signal.SIGTERM)\nprint('alive')\n")
    assert r.ok and r.stdout == "alive\n"


# ---- processes ----------------------------------------------------------------------------------

def test_detached_child_does_not_outlive_the_run() -> None:
    code = ("import subprocess\n"
            "subprocess.Popen(['/bin/sleep', '60'], start_new_session=True)\n"
            "print('parent done')\n")
    r = attack(code, timeout_s=SHORT_PROGRAM_S)
    assert r.ok and "parent done" in r.stdout


def test_double_forked_daemon_does_not_outlive_the_run() -> None:
    code = ("import os, time\n"
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\n"
            "os.wait()\nprint('detached')\n")
    r = attack(code, timeout_s=SHORT_PROGRAM_S)
    assert r.ok and r.stdout == "detached\n"


def test_process_limit_stops_forking(mechanism) -> None:
    code = ("import os, time\nmade = 0\n"
            "for _ in range(200):\n"
            "    try:\n        pid = os.fork()\n"
            "    except OSError as e:\n        print('blocked', made, flush=True)\n        break\n"
            "    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
            "    made += 1\n")
    r = attack(code, timeout_s=SHORT_PROGRAM_S, max_processes=12)
    assert r.stdout.startswith("blocked")
    assert int(r.stdout.split()[1]) < 12


def test_fork_bomb_is_contained(mechanism) -> None:
    r = attack("import os\nwhile True:\n    os.fork()\n", timeout_s=1.5, max_processes=12)
    assert not r.ok
    assert subprocess.run(["true"]).returncode == 0  # the host can still spawn processes


def test_thread_bomb_is_contained(mechanism) -> None:
    code = ("import threading, time\nmade = 0\n"
            "try:\n    while True:\n        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
            "        made += 1\n"
            "except (RuntimeError, MemoryError) as e:\n    print('blocked', made, type(e).__name__)\n")
    r = attack(code, timeout_s=SHORT_PROGRAM_S, max_processes=12)
    assert r.stdout.startswith("blocked"), r.stderr
    assert int(r.stdout.split()[1]) < 12  # threads are tasks: counted against the process bound


def test_signals_reach_only_the_calls_own_processes() -> None:
    host_sleeper = subprocess.Popen(["sleep", "30"])
    try:
        code = ("import os, signal\n"
                "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
                f"for pid in (-1, {host_sleeper.pid}, {os.getpid()}):\n"
                "    try:\n        os.kill(pid, signal.SIGKILL)\n"
                "    except OSError as e:\n        print('failed', pid, type(e).__name__)\n")
        r = attack(code, timeout_s=SHORT_PROGRAM_S)
        assert host_sleeper.poll() is None  # the host's process survived kill(-1) and kill(pid)
        assert r.stdout.splitlines()[0] == "[1]"  # the call sees its own pid namespace only
    finally:
        host_sleeper.kill()
        host_sleeper.wait()


def test_setuid_programs_do_not_give_root() -> None:
    code = ("import os, subprocess\n"
            "for cmd in (['su', '-c', 'id -u'], ['mount', '-t', 'tmpfs', 'x', '/sandbox']):\n"
            "    try:\n        print(subprocess.run(cmd, capture_output=True, timeout=2).returncode != 0)\n"
            "    except OSError:\n        print(True)\n"
            "try:\n    os.setuid(0)\n    print('ROOT')\nexcept OSError:\n    print('no setuid')\n")
    r = attack(code, timeout_s=SHORT_PROGRAM_S)
    assert r.stdout.split() == ["True", "True", "no", "setuid"], r.stdout + r.stderr


# ---- memory -------------------------------------------------------------------------------------

def test_memory_bomb_fails(mechanism) -> None:
    r = attack("x = bytearray(2 * 1024 ** 3)\nprint('allocated')\n")
    assert not r.ok and "allocated" not in r.stdout
    assert "MemoryError" in r.stderr


def test_forks_each_under_the_process_limit_do_not_add_up(mechanism) -> None:
    # The attack behind issue 12: 20 forks x 200 MB held 3.6 GB under per-process limits. Here
    # each child stays under RLIMIT_AS (80 MB < 96 MB) but together they ask for 1.6 GB.
    code = ("import os, time\n"
            "for i in range(20):\n"
            "    if os.fork() == 0:\n"
            "        try:\n            block = bytearray(80 * 1024 * 1024)\n            print('child', i, flush=True)\n"
            "        except MemoryError:\n            pass\n"
            "        time.sleep(3)\n        os._exit(0)\n"
            "time.sleep(1.5)\nprint('parent done')\n")
    r = attack(code, timeout_s=SHORT_PROGRAM_S, max_processes=32)
    assert "memory" in r.limits_hit, r
    assert r.bounds.startswith("budget" if mechanism == "budget" else ("budget", "cgroup"))
    assert r.stdout.count("child") < 2  # at most one 80 MB child fits in the 96 MB + 16 MB call
    if not r.ok:
        assert "memory bound" in r.error


def test_threads_allocating_together_are_bounded(mechanism) -> None:
    code = ("import threading, time\nheld = []\n"
            "def grab():\n    try:\n        held.append(bytearray(30 * 1024 * 1024))\n    except MemoryError:\n        pass\n"
            "    time.sleep(1)\n"
            "ts = [threading.Thread(target=grab) for _ in range(8)]\n"
            "[t.start() for t in ts]\n[t.join() for t in ts]\nprint(len(held))\n")
    r = attack(code, timeout_s=SHORT_PROGRAM_S, max_processes=32)
    if r.ok:
        assert int(r.stdout) <= 3  # one process: its address space limit, 96 MB


def test_pipes_stuffed_with_data_are_bounded(mechanism) -> None:
    # Pipe buffers are kernel memory, in no process's PSS: a cgroup charges them to the call;
    # without one the kernel's per-user pipe quota (fs.pipe-user-pages-soft) bounds them, and
    # every call has a user of its own.
    code = ("import os, fcntl\npipes = []\n"
            "try:\n    while True:\n        r, w = os.pipe()\n"
            "        fcntl.fcntl(w, 1031, 1 << 20)\n"  # F_SETPIPE_SZ: 1 MB of buffer
            "        os.set_blocking(w, False)\n"
            "        try:\n            while True:\n                os.write(w, b'x' * 65536)\n"
            "        except BlockingIOError:\n            pass\n"
            "        pipes.append((r, w))\n"
            "except OSError as e:\n    print(len(pipes), type(e).__name__)\n")
    r = attack(code, timeout_s=SHORT_PROGRAM_S)
    with open("/proc/sys/fs/pipe-user-pages-soft") as f:
        quota_mb = int(f.read()) * 4096 >> 20
    full_pipes = int(r.stdout.split()[0])
    assert full_pipes <= max(quota_mb, MEMORY_MB + DISK_MB), r.stdout
    if r.bounds.startswith("cgroup"):
        assert r.peak_memory_bytes <= (MEMORY_MB + DISK_MB) << 20


# ---- storage ------------------------------------------------------------------------------------

def test_work_dir_is_size_capped_and_never_on_the_host_disk() -> None:
    # issue 12: many 8 MB files wrote 1.2 GB to the host's disk in 4.5 s
    code = ("written = 0\n"
            "try:\n    for i in range(200):\n"
            "        with open(f'f{i}', 'wb') as f:\n            f.write(b'x' * (8 << 20))\n"
            "        written += 8\n"
            "except OSError as e:\n    print(written, e.strerror)\n")
    before = set(os.listdir(tempfile.gettempdir()))
    r = attack(code, timeout_s=SHORT_PROGRAM_S, max_file_mb=8)
    assert r.ok, r.stderr
    written, reason = r.stdout.split(" ", 1)
    assert int(written) < DISK_MB and "No space left" in reason
    assert set(os.listdir(tempfile.gettempdir())) <= before


def test_tmp_shm_and_work_dir_share_one_cap() -> None:
    code = ("import os\ntotal = 0\n"
            "for d in ('/tmp', '/dev/shm', '.'):\n"
            "    try:\n        for i in range(100):\n"
            "            with open(os.path.join(d, f'big{i}'), 'wb') as f:\n                f.write(b'x' * (1 << 20))\n"
            "            total += 1\n"
            "    except OSError as e:\n        print(d, e.strerror)\n"
            "print(total)\n")
    r = attack(code, timeout_s=SHORT_PROGRAM_S)
    lines = r.stdout.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["/tmp", "/dev/shm", "."]
    assert int(lines[-1]) < DISK_MB  # all three together, not each


def test_root_dev_and_usr_are_read_only() -> None:
    token = uuid.uuid4().hex
    code = ("import os\n"
            f"for path in ['/x-{token}', '/dev/x-{token}', '/usr/x-{token}', '/proc/x-{token}']:\n"
            "    try:\n        open(path, 'w').write('x' * 1000)\n        print('WROTE', path)\n"
            "    except OSError as e:\n        print(e.strerror)\n"
            "for path in ['/', '/dev']:\n"
            "    try:\n        os.mkdir(path + '/d')\n        print('MKDIR', path)\n"
            "    except OSError as e:\n        print(e.strerror)\n")
    r = attack(code)
    assert "WROTE" not in r.stdout and "MKDIR" not in r.stdout, r.stdout
    assert r.stdout.count("Read-only file system") >= 4


def test_one_file_is_capped_by_max_file_mb() -> None:
    r = attack("open('big', 'wb').write(b'x' * (3 << 20))\nprint('wrote')\n", max_file_mb=1)
    assert not r.ok and "wrote" not in r.stdout


def test_writes_outside_the_work_dir_fail(tmp_path) -> None:
    token = uuid.uuid4().hex
    repository = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    targets = [os.path.join(repository, f"pwned-{token}"), f"/tmp/reinforge-pwned-{token}", f"/usr/pwned-{token}",
               f"/opt/python/pwned-{token}", str(tmp_path / f"pwned-{token}")]
    code = ("import sys\n"
            f"for path in {targets!r}:\n"
            "    try:\n        open(path, 'w').write('pwned')\n        print('WROTE', path)\n"
            "    except OSError as e:\n        print('failed', path, type(e).__name__)\n"
            "open('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())\n")
    r = attack(code)
    assert r.ok, r.stderr
    for path in targets:
        assert not os.path.exists(path)
    # /tmp inside is part of the call's private tmpfs: the write may succeed there, never on the host
    assert [line for line in r.stdout.splitlines() if line.startswith("WROTE")] in (
        [], [f"WROTE /tmp/reinforge-pwned-{token}"])
    assert r.stdout.splitlines()[-1] == "ok"


# ---- what the sandbox can see -------------------------------------------------------------------

def test_host_files_are_not_readable(tmp_path) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    (tmp_path / "secret.txt").write_text(secret)
    paths = ["/etc/shadow", "/etc/passwd", str(tmp_path / "secret.txt")]
    code = ("import os\n"
            f"for path in {paths!r}:\n"
            "    try:\n        print('READ', open(path).read())\n"
            "    except OSError as e:\n        print('failed', path, type(e).__name__)\n"
            "for d in ['/root', '/work', '/home', '/etc']:\n"
            "    print(d, os.path.exists(d))\n")
    r = attack(code)
    assert r.ok, r.stderr
    assert secret not in r.stdout + r.stderr
    assert "READ" not in r.stdout
    for d in ["/root", "/work", "/home", "/etc"]:
        assert f"{d} False" in r.stdout


def test_mountinfo_shows_no_host_work_dir() -> None:
    r = attack("print(open('/proc/self/mountinfo').read())\nimport os\nprint(os.listdir('/sandbox'))\n")
    assert r.ok, r.stderr
    assert tempfile.gettempdir() + "/" not in r.stdout and "reinforge-sandbox" not in r.stdout
    assert os.getcwd() not in r.stdout
    mounts = {line.split()[4]: line.split(" - ")[1].split()[0] for line in r.stdout.splitlines() if " - " in line}
    assert mounts["/sandbox"] == "tmpfs" and mounts["/"] == "tmpfs"
    writable = [point for point, line in ((l.split()[4], l) for l in r.stdout.splitlines() if " - " in l)
                if line.split()[5].startswith("rw") and point not in ("/proc",) and not point.startswith("/dev/")]
    assert writable == ["/sandbox"]  # the one writable mount (device nodes aside)


def test_site_packages_are_not_importable() -> None:
    import site
    import sys
    host_dirs = site.getsitepackages([sys.base_prefix]) + site.getsitepackages()
    code = ("import sys\n"
            f"sys.path += {host_dirs!r} + ['/opt/python/lib/python3.11/site-packages']\n"
            "for name in ('pytest', 'torch', 'boto3', 'pip', 'reinforge', 'yaml'):\n"
            "    try:\n        __import__(name)\n        print('IMPORTED', name)\n"
            "    except ImportError:\n        print('absent', name)\n"
            "import json, sqlite3, ctypes\nprint('stdlib ok')\n")
    r = attack(code)
    assert r.ok, r.stderr
    assert "IMPORTED" not in r.stdout and "stdlib ok" in r.stdout


def test_environment_holds_nothing_of_the_host(monkeypatch) -> None:
    monkeypatch.setenv("REINFORGE_SECRET_TOKEN", "hunter2")
    r = attack("import os\nprint(dict(os.environ))\n")
    environment = eval(r.stdout)
    assert set(environment) <= {"PATH", "HOME", "LANG", "TMPDIR", "LD_LIBRARY_PATH", "PWD", "MALLOC_ARENA_MAX"}
    assert environment["HOME"] == environment.get("PWD", "/sandbox") == "/sandbox"


def test_network_is_unreachable() -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(3)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    listener = threading.Thread(target=accept)
    listener.start()
    code = ("import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n    print('CONNECTED')\n"
            "except OSError as e:\n    print('failed', type(e).__name__)\n")
    try:
        r = attack(code, timeout_s=SHORT_PROGRAM_S)
    finally:
        listener.join()
        server.close()
    assert r.ok and r.stdout.startswith("failed")
    assert accepted == []


# ---- syscalls (the seccomp filter) --------------------------------------------------------------

@pytest.mark.parametrize("calls", [
    [("io_uring_setup", 425, 425)],
    [("keyctl", 250, 219), ("add_key", 248, 217), ("request_key", 249, 218)],
    [("ptrace", 101, 117), ("process_vm_readv", 310, 270), ("process_vm_writev", 311, 271)],
    [("unshare", 272, 97), ("setns", 308, 268), ("mount", 165, 40), ("pivot_root", 155, 41)],
    [("bpf", 321, 280), ("perf_event_open", 298, 241), ("userfaultfd", 323, 282)],
    [("memfd_create", 319, 279)],
    [("io_uring_setup via the x32 ABI", 425 | 0x40000000, 425)],
], ids=["io_uring", "keyrings", "ptrace", "namespaces", "bpf_perf_uffd", "memfd", "x32"])
def test_denied_syscalls_fail_with_eperm(calls) -> None:
    r = attack(syscall_code(*calls))
    assert r.ok, r.stderr
    assert r.stdout.splitlines() == [f"{name} EPERM" for name, _, _ in calls]


def test_allowed_syscalls_still_work() -> None:
    r = attack(syscall_code(("getppid", 110, 173)))
    assert r.stdout.split()[-1] == "OK"


# ---- output -------------------------------------------------------------------------------------

def test_huge_output_is_truncated_promptly() -> None:
    r = attack("print('x' * 10 ** 8)", max_output_bytes=65536, timeout_s=60, memory_mb=256)
    assert not r.timed_out  # stopped by the output limit, long before the wall clock
    assert len(r.stdout) == 65536 and set(r.stdout) == {"x"}
    assert not r.ok and "output exceeded" in r.error and "output" in r.limits_hit


def test_stderr_flood_is_truncated() -> None:
    r = attack("import sys\nwhile True:\n    sys.stderr.write('e' * 65536)\n", max_output_bytes=65536, timeout_s=30)
    assert not r.timed_out and "output exceeded" in r.error and len(r.stderr) == 65536


# ---- failing closed -----------------------------------------------------------------------------

def test_missing_bubblewrap_fails_closed(monkeypatch) -> None:
    real_which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    monkeypatch.setattr(sandbox_supervisor.subprocess, "Popen", lambda *a, **k: pytest.fail("ran without bwrap"))
    with pytest.raises(SandboxUnavailableError, match="bubblewrap"):
        run_python("print('hi')")


def test_unknown_architecture_fails_closed(monkeypatch) -> None:
    monkeypatch.setattr(sandbox.seccomp.platform, "machine", lambda: "riscv64")
    monkeypatch.setattr(sandbox_supervisor.subprocess, "Popen", lambda *a, **k: pytest.fail("ran without a syscall filter"))
    with pytest.raises(SandboxUnavailableError, match="riscv64"):
        run_python("print('hi')")
