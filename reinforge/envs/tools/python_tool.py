"""A Python tool: model-written code, run in the subprocess sandbox (`sandbox.run_python`).

Success returns what the program printed; any failure (an exception, a non-zero exit, a time,
memory, process or output limit) raises `PythonToolError`, so `call_tool` reports it as an
`ok=False` result whose text shows the model the reason and the program's stderr.

The sandbox enforces its own wall-clock limit and kills the whole process tree; the Tool's
thread timeout is set above it (plus the time a kill takes), so the sandbox's own, more precise
error is what the model sees, and the thread timeout is only a last resort.
"""

from __future__ import annotations

from reinforge.envs.tools import sandbox
from reinforge.envs.tools.registry import Tool, tool_from_function

_KILL_SLACK_S = 10.0  # the sandbox may spend a few seconds killing and reaping a process tree
NO_OUTPUT = "(no output; use print() to show a value)"


class PythonToolError(RuntimeError):
    """The program failed or hit a sandbox limit; the message says which, with its output."""


def truncate(text: str, max_chars: int) -> str:
    """The first `max_chars` characters of `text`, saying how much was cut."""
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n... [truncated {len(text) - max_chars} characters]"


def truncate_start(text: str, max_chars: int) -> str:
    """The last `max_chars` characters: the end of a traceback is the part that names the error."""
    if len(text) <= max_chars:
        return text
    return f"[truncated {len(text) - max_chars} characters] ...\n" + text[-max_chars:]


def python_tool(*, timeout_s: float = 5.0, cpu_s: int = 5, memory_mb: int = 256, max_processes: int = 32,
                max_file_mb: int = 8, disk_mb: int = 32, max_output_chars: int = 2000) -> Tool:
    """The `python` tool. Checks here, before any call, that the sandbox works on this machine.

    memory_mb and max_processes bound each call as a whole (all its processes); disk_mb is the
    size of all it may write (work dir, /tmp, /dev/shm together); max_file_mb caps one file.
    """
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"python tool: timeout_s must be a positive number, got {timeout_s!r}")
    for key, value in {"cpu_s": cpu_s, "memory_mb": memory_mb, "max_processes": max_processes,
                       "max_file_mb": max_file_mb, "disk_mb": disk_mb, "max_output_chars": max_output_chars}.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"python tool: {key} must be a positive integer, got {value!r}")
    sandbox.check_sandbox()  # raises SandboxUnavailableError now, not on the model's first call
    # The sandbox stops reading at this many bytes; a little more than we show, so truncation is visible.
    max_output_bytes = 4 * max_output_chars + 1024

    def python(code: str) -> str:
        """Run a Python 3 program in a sandbox (no network, no host files) and return what it printed.

        Args:
            code: the complete program; print() the values you want to see.
        """
        result = sandbox.run_python(code, timeout_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb,
                                    max_processes=max_processes, max_file_mb=max_file_mb, disk_mb=disk_mb,
                                    max_output_bytes=max_output_bytes)
        if result.ok:
            return truncate(result.stdout, max_output_chars) if result.stdout else NO_OUTPUT
        reason = result.error or f"exited with code {result.exit_code}"
        parts = [f"program failed: {reason}"]
        half = max(1, max_output_chars // 2)
        if result.stdout:
            parts.append("stdout:\n" + truncate(result.stdout, half))
        if result.stderr:
            parts.append("stderr:\n" + truncate_start(result.stderr, half))
        raise PythonToolError("\n".join(parts))

    return tool_from_function(python, timeout_s=timeout_s + _KILL_SLACK_S)
