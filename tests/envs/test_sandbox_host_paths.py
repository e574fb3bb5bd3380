"""Issue 31: the sandbox names no host path of ours where model code can read it.

The interpreter is the host's (pyenv under the home directory here, run through the repository's
venv), mounted at the neutral /opt/python: neither its install path, nor the venv, nor the
repository, nor the home directory may show in /proc/self/mountinfo (as root the install comes as an
overlay, whose root field is "/", not the bind source's path), sys.executable, sys.prefix or
sys.path. Runs under this machine's cgroup and under the polled budget, which mount alike.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from deadlines import SHORT_PROGRAM_S

from reinforge.envs.tools.sandbox import run_python

REPOSITORY = str(Path(__file__).resolve().parents[2])

INSIDE = """
import json, sys
import ctypes, decimal, json, sqlite3  # C extensions from lib-dynload: the install serves through its new mount
print(json.dumps({
    "mountinfo": open("/proc/self/mountinfo").read(),
    "sys.path": sys.path,
    "sys.executable": sys.executable,
    "sys._base_executable": sys._base_executable,
    "sys.prefix": [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix],
}))
"""


def host_paths() -> dict[str, str]:
    """Paths of this host that say where and whose the run is (a path under /usr says nothing)."""
    paths = {
        "repository": REPOSITORY,
        "home directory": os.path.expanduser("~"),
        "working directory": os.getcwd(),
        "venv": sys.prefix,
        "python install": sys.base_prefix,
    }
    resolved = {f"{what} ({kind})": path for what, raw in paths.items() for kind, path in (("as given", raw), ("resolved", os.path.realpath(raw)))}
    return {what: path for what, path in resolved.items() if path != "/" and not path.startswith("/usr")}


def named_in(path: str, text: str) -> bool:
    """`path` as a path in `text`: not the tail of a longer name (/root in /newroot) nor its head (/root in /rootfs)."""
    return re.search(r"(?<![\w.-])" + re.escape(path) + r"(?![\w.-])", text) is not None


def test_the_path_check_finds_a_path_only_as_a_path() -> None:
    assert named_in("/root", "92 90 254:0 /root/.pyenv/versions/3.11.7 /opt/python ro")
    assert named_in("/work/x/.venv", "['/work/x/.venv']")
    assert not named_in("/root", "90 65 0:41 /newroot / ro") and not named_in("/root", "/rootfs/x")


def test_no_host_path_in_mountinfo_sys_path_or_the_executable(mechanism) -> None:
    result = run_python(INSIDE, timeout_s=SHORT_PROGRAM_S)
    assert result.ok, result.stderr
    seen = json.loads(result.stdout)
    assert seen["sys.executable"].startswith("/opt/python/") or seen["sys.executable"].startswith("/usr/")
    places = dict(seen)
    if os.geteuid() != 0:  # without root no overlay can be mounted: bwrap binds the install, whose mountinfo line names it
        places.pop("mountinfo")
    leaks = [f"{what} {path} in {place}" for what, path in host_paths().items() for place, value in places.items()
             if named_in(path, json.dumps(value) if not isinstance(value, str) else value)]
    assert not leaks, leaks
