"""The Python sandbox: model code runs confined, and the host is checked after each escape try."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid

import pytest

from reinforge.envs.tools import sandbox
from reinforge.envs.tools.sandbox import SandboxUnavailableError, run_python


def processes_of(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def assert_nothing_left(result) -> None:
    with pytest.raises(ProcessLookupError):
        os.kill(result.pid, 0)  # reaped: no such process
    if result.uid is not None:  # running as root: every run has a uid of its own
        assert processes_of(result.uid) == []


def test_normal_code_prints_output_and_reads_stdin() -> None:
    code = "import os, sys\nprint('hello', sum(range(10)), os.getcwd())\nprint(sys.stdin.read().upper())\n"
    r = run_python(code, stdin="abc")
    assert r.ok and r.exit_code == 0 and not r.timed_out and r.error is None
    assert r.stdout == "hello 45 /sandbox\nABC\n"
    assert_nothing_left(r)


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


def test_infinite_loop_times_out_and_leaves_nothing() -> None:
    start = time.monotonic()
    r = run_python("while True:\n    pass\n", timeout_s=1, cpu_s=10)
    assert r.timed_out and not r.ok and "timed out" in r.error
    assert time.monotonic() - start < 1 + 10  # an infinite loop: any bound means it was stopped
    assert_nothing_left(r)


def test_cpu_limit_kills_before_wall_clock() -> None:
    r = run_python("while True:\n    pass\n", timeout_s=60, cpu_s=1)
    assert not r.ok and not r.timed_out and r.error is not None  # the CPU limit, not the wall clock
    assert "SIGXCPU" in r.error or "SIGKILL" in r.error
    assert_nothing_left(r)


def test_detached_child_does_not_outlive_the_run() -> None:
    code = ("import subprocess\n"
            "subprocess.Popen(['/bin/sleep', '60'], start_new_session=True)\n"
            "print('parent done')\n")
    r = run_python(code, timeout_s=3)
    assert r.ok and "parent done" in r.stdout
    assert_nothing_left(r)


def test_process_limit_stops_forking() -> None:
    code = ("import os, time\nmade = 0\n"
            "for _ in range(200):\n"
            "    try:\n        pid = os.fork()\n"
            "    except OSError as e:\n        print('blocked', made, flush=True)\n        break\n"
            "    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
            "    made += 1\n")
    r = run_python(code, timeout_s=3, max_processes=12)
    assert r.stdout.startswith("blocked")
    assert int(r.stdout.split()[1]) < 12
    assert_nothing_left(r)


def test_fork_bomb_is_contained() -> None:
    r = run_python("import os\nwhile True:\n    os.fork()\n", timeout_s=1.5, max_processes=12)
    assert not r.ok
    assert_nothing_left(r)
    assert subprocess.run(["true"]).returncode == 0  # the host can still spawn processes


def test_memory_bomb_fails() -> None:
    r = run_python("x = bytearray(2 * 1024 ** 3)\nprint('allocated')\n", memory_mb=256)
    assert not r.ok and "allocated" not in r.stdout
    assert "MemoryError" in r.stderr
    assert_nothing_left(r)


def test_writes_outside_the_work_dir_fail(tmp_path) -> None:
    token = uuid.uuid4().hex
    targets = [f"/work/main/pwned-{token}", f"/tmp/reinforge-pwned-{token}", f"/usr/pwned-{token}",
               f"/opt/python/pwned-{token}", str(tmp_path / f"pwned-{token}")]
    code = ("import sys\n"
            f"for path in {targets!r}:\n"
            "    try:\n        open(path, 'w').write('pwned')\n        print('WROTE', path)\n"
            "    except OSError as e:\n        print('failed', path, type(e).__name__)\n"
            "open('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())\n")
    r = run_python(code)
    assert r.ok, r.stderr
    for path in targets:
        assert not os.path.exists(path)
    # /tmp inside is a private tmpfs: the write may succeed there but never reaches the host
    assert [line for line in r.stdout.splitlines() if line.startswith("WROTE")] in (
        [], [f"WROTE /tmp/reinforge-pwned-{token}"])
    assert r.stdout.splitlines()[-1] == "ok"


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
    r = run_python(code)
    assert r.ok, r.stderr
    assert secret not in r.stdout + r.stderr
    assert "READ" not in r.stdout
    for d in ["/root", "/work", "/home", "/etc"]:
        assert f"{d} False" in r.stdout


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
        r = run_python(code, timeout_s=4)
    finally:
        listener.join()
        server.close()
    assert r.ok and r.stdout.startswith("failed")
    assert accepted == []


def test_huge_output_is_truncated_promptly() -> None:
    r = run_python("print('x' * 10 ** 8)", max_output_bytes=65536, timeout_s=60, memory_mb=512)
    assert not r.timed_out  # stopped by the output limit, long before the wall clock
    assert len(r.stdout) == 65536 and set(r.stdout) == {"x"}
    assert not r.ok and "output exceeded" in r.error
    assert_nothing_left(r)


def test_missing_bubblewrap_fails_closed(monkeypatch) -> None:
    real_which = sandbox.shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None if name == "bwrap" else real_which(name))
    monkeypatch.setattr(sandbox.subprocess, "Popen", lambda *a, **k: pytest.fail("ran without bwrap"))
    with pytest.raises(SandboxUnavailableError, match="bubblewrap"):
        run_python("print('hi')")
