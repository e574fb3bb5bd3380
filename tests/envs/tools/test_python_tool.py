"""The python tool: model code through the sandbox, failures and limit hits as ok=False results."""

from __future__ import annotations

import socket
import time

import pytest
from deadlines import SHORT_PROGRAM_S

from reinforge.envs.tools import sandbox_bounds
from reinforge.envs.tools.calls import ToolCall, parse_compact
from reinforge.envs.tools.execution import call_tool
from reinforge.envs.tools.python_tool import NO_OUTPUT, python_tool
from reinforge.envs.tools.registry import ToolRegistry


@pytest.fixture(scope="module")
def registry() -> ToolRegistry:
    # The wall clock covers the sandboxed interpreter's start: generous for programs meant to finish.
    return ToolRegistry([python_tool(timeout_s=SHORT_PROGRAM_S, max_processes=12, max_output_chars=200)])


@pytest.fixture(scope="module")
def tight() -> ToolRegistry:
    """For programs meant to hit a limit: one that never ends must stop after 1 s."""
    return ToolRegistry([python_tool(timeout_s=1.0, max_processes=12, max_output_chars=200)])


def run(registry: ToolRegistry, code: str):
    return call_tool(registry, ToolCall("python", {"code": code}))


def test_prints_output(registry) -> None:
    result = run(registry, "import math\nprint(sum(range(10)), math.factorial(20))\n")
    assert result.ok and result.content == "45 2432902008176640000\n"
    assert run(registry, "x = 1").content == NO_OUTPUT


def test_compact_call_binds_the_code(registry) -> None:
    turn = parse_compact("<<python: print(6 * 7)>>", registry)
    assert call_tool(registry, turn.calls[0]).content == "42\n"


def test_exception_shows_the_traceback_tail(registry) -> None:
    result = run(registry, "print('before')\nraise KeyError('missing')\n")
    assert not result.ok and result.error.startswith("PythonToolError: program failed: exited with code 1")
    assert "stdout:\nbefore" in result.error and "KeyError: 'missing'" in result.error


def test_long_output_is_truncated(registry) -> None:
    result = run(registry, "print('x' * 500)")
    assert result.ok and result.content.startswith("x" * 200 + "\n... [truncated 301 characters]")


def test_timeout_is_an_error_result(tight) -> None:
    start = time.monotonic()
    result = run(tight, "while True:\n    pass\n")
    assert not result.ok and "timed out after 1s" in result.error
    assert time.monotonic() - start < 1 + 10  # an infinite loop: any bound means it was stopped


def test_fork_bomb_through_the_tool_is_an_error(registry, tight) -> None:
    result = run(tight, "import os\nwhile True:\n    os.fork()\n")
    assert not result.ok and result.error.startswith("PythonToolError: program failed")
    assert run(registry, "print('still fine')").content == "still fine\n"


def test_network_through_the_tool_is_an_error() -> None:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)  # a connection would complete into this backlog even with nobody in accept()
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=1)\nprint('CONNECTED')\n"
    try:
        result = call_tool(ToolRegistry([python_tool(timeout_s=SHORT_PROGRAM_S)]), ToolCall("python", {"code": code}))
        server.setblocking(False)
        with pytest.raises(BlockingIOError):  # nobody connected
            server.accept()
    finally:
        server.close()
    assert not result.ok and "CONNECTED" not in result.content
    assert "OSError" in result.error or "Errno" in result.error


def test_limit_hits_are_named_in_the_error() -> None:
    registry = ToolRegistry([python_tool(timeout_s=SHORT_PROGRAM_S, memory_mb=64, disk_mb=4, max_output_chars=400)])
    forks = ("import os, time\nfor i in range(8):\n    if os.fork() == 0:\n"
             "        b = bytearray(50 * 1024 * 1024)\n        time.sleep(2)\n        os._exit(0)\n"
             "os.wait()\nraise SystemExit(os.waitstatus_to_exitcode(os.wait()[1]))\n")
    result = run(registry, forks)
    assert not result.ok and "memory bound" in result.error, result.error
    bomb = run(registry, "import os, time\nfor _ in range(100):\n    os.fork()\n")
    assert not bomb.ok and bomb.error.startswith("PythonToolError: program failed"), bomb.error
    if sandbox_bounds.detect()[0].kernel_enforced:  # a cgroup counts refused forks (pids.events)
        assert "process bound was reached" in bomb.error, bomb.error
    # the polled budget (no cgroup) names the bound only when a census of the call's processes
    # found it full; RLIMIT_NPROC refuses forks silently, so a bomb that fills and drains between
    # two censuses is reported by its own output alone (measured: 4 of 40 here)
    disk = run(registry, "open('f', 'wb').write(b'x' * (6 << 20))")
    assert not disk.ok and "No space left on device" in disk.error


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="memory_mb must be a positive integer"):
        python_tool(memory_mb=0)
    with pytest.raises(ValueError, match="disk_mb must be a positive integer"):
        python_tool(disk_mb=0)
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        python_tool(timeout_s=-1)
