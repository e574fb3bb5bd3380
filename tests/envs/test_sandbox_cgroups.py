"""The whole-call bounds' cgroup file protocol (reinforge/envs/tools/sandbox_bounds.py), against a
fake cgroup filesystem in a temp dir, and the choice of mechanism (v2, v1, budget) from fake mount
tables.

What this covers: which directories the bounds make, the exact limit values they write (derived
from the sandbox's limits), the join of the call's process, how they read which bound hit, the
kill through `cgroup.kill` and the sweep of `cgroup.procs`, and the removal. What it cannot cover:
that a kernel enforces those files. This box has cgroup v1 memory and pids controllers (the real
v1 path runs in tests/envs/test_sandbox.py) and a cgroup2 mount with only hugetlb, so kernel
enforcement under cgroup v2 is not exercised here.

The fake does what cgroupfs does that a plain directory does not: a mkdir under its root creates
the interface files, an rmdir removes them and is refused (EBUSY) while a live process is listed
in `cgroup.procs`. Processes "in" a fake cgroup are real `sleep` children whose pids the test
writes into `cgroup.procs`, as the kernel would list them.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pytest

from reinforge.envs.tools import sandbox_bounds
from reinforge.envs.tools.sandbox_bounds import CallBounds, CgroupV1Bounds, CgroupV2Bounds, call_bounds, choose

V2_FILES = {
    "cgroup.procs": "", "cgroup.kill": "", "cgroup.controllers": "", "cgroup.subtree_control": "",
    "memory.max": "max\n", "memory.swap.max": "max\n", "memory.peak": "0\n", "pids.max": "max\n",
    "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", "pids.events": "max 0\n",
}
V1_MEMORY_FILES = {
    "cgroup.procs": "", "memory.limit_in_bytes": "9223372036854771712\n", "memory.memsw.limit_in_bytes": "9223372036854771712\n",
    "memory.max_usage_in_bytes": "0\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
    "memory.kmem.tcp.limit_in_bytes": "9223372036854771712\n",
}
V1_PIDS_FILES = {"cgroup.procs": "", "pids.max": "max\n", "pids.events": "max 0\n"}


def alive(pid: int) -> bool:
    """Running (a zombie, killed but not yet reaped, has left its cgroup as far as the kernel is concerned)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class FakeCgroupfs:
    """Directories under `root` behave like cgroups of one hierarchy, whose new children get `files`
    (minus `absent`; `broken` ones are directories, so writing them fails as a refused write does)."""

    def __init__(self, root: Path, files: dict[str, str], absent=(), broken=()):
        self.root, self.files, self.absent, self.broken = root, files, set(absent), set(broken)
        root.mkdir(parents=True, exist_ok=True)

    def owns(self, path) -> bool:
        path = Path(os.fspath(path))
        return path.parent == self.root or self.root in path.parents

    def mkdir(self, path, mode=0o777, real=os.mkdir) -> None:
        real(path, mode)
        if self.owns(path):
            for name, content in self.files.items():
                if name in self.broken:
                    real(os.path.join(path, name))
                elif name not in self.absent:
                    Path(path, name).write_text(content)

    def rmdir(self, path, real=os.rmdir) -> None:
        if self.owns(path) and os.path.isdir(path):
            procs = Path(path, "cgroup.procs")
            if procs.exists() and any(alive(int(p)) for p in procs.read_text().split()):
                raise OSError(errno.EBUSY, "Device or resource busy", os.fspath(path))
            for entry in Path(path).iterdir():
                real(entry) if entry.is_dir() else entry.unlink()  # a broken file: an empty directory
        real(path)


@pytest.fixture
def cgroupfs(monkeypatch):
    """Install fake cgroup hierarchies: `cgroupfs(root, files, ...)`; mkdir/rmdir elsewhere are untouched."""
    fakes: list[FakeCgroupfs] = []
    real_mkdir, real_rmdir = os.mkdir, os.rmdir

    def mkdir(path, mode=0o777, **kw):
        fake = next((f for f in fakes if f.owns(path)), None)
        return fake.mkdir(path, mode, real_mkdir) if fake else real_mkdir(path, mode, **kw)

    def rmdir(path, **kw):
        fake = next((f for f in fakes if f.owns(path)), None)
        return fake.rmdir(path, real_rmdir) if fake else real_rmdir(path, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "rmdir", rmdir)

    def make(root: Path, files: dict[str, str], **options) -> FakeCgroupfs:
        fakes.append(FakeCgroupfs(root, files, **options))
        return fakes[-1]

    return make


@pytest.fixture
def sleeper():
    """A real process to stand in for the call's process in a fake cgroup."""
    process = subprocess.Popen(["sleep", "60"])
    yield process
    if process.poll() is None:
        process.kill()
    process.wait()


def only_child(parent: Path) -> Path:
    children = [p for p in parent.iterdir() if p.is_dir()]
    assert len(children) == 1, children
    return children[0]


def read(path: Path) -> str:
    return path.read_text().strip()


# ---------------------------------------------------------------------------- cgroup v2


def test_v2_makes_the_calls_cgroup_with_limits_from_the_sandbox_limits(cgroupfs, tmp_path, monkeypatch) -> None:
    parent = tmp_path / "v2" / "ours"
    cgroupfs(parent, V2_FILES)
    monkeypatch.setattr(sandbox_bounds, "detect", lambda: (CgroupV2Bounds, (str(parent),)))
    memory_mb, disk_mb, max_processes = 200, 64, 32
    bounds = call_bounds(memory_mb << 20, disk_mb << 20, max_processes)
    assert isinstance(bounds, CgroupV2Bounds) and bounds.kernel_enforced
    made = only_child(parent)
    assert made.name.startswith(f"reinforge-sandbox-{os.getpid()}-")  # names its owner
    # The tmpfs pages are charged to the cgroup too: the memory limit is memory + storage.
    assert read(made / "memory.max") == str((memory_mb + disk_mb) << 20) == str(276824064)
    assert read(made / "memory.swap.max") == "0"  # no swapping out past the limit
    assert read(made / "pids.max") == str(max_processes)
    assert bounds.describe() == f"cgroup v2: memory.max {memory_mb + disk_mb} MB, pids.max {max_processes}"
    bounds.close()
    assert list(parent.iterdir()) == []


def test_v2_without_swap_accounting_writes_no_swap_limit(cgroupfs, tmp_path) -> None:
    parent = tmp_path / "ours"
    cgroupfs(parent, V2_FILES, absent={"memory.swap.max"})
    bounds = CgroupV2Bounds(64 << 20, 8, str(parent))
    assert not (Path(bounds.dir) / "memory.swap.max").exists()
    assert read(Path(bounds.dir) / "memory.max") == str(64 << 20)
    bounds.close()


def test_v2_join_moves_the_calls_process_in(cgroupfs, tmp_path) -> None:
    """The sandbox joins in preexec_fn, between fork and exec: the pid written is the call's own."""
    parent = tmp_path / "ours"
    cgroupfs(parent, V2_FILES)
    bounds = CgroupV2Bounds(64 << 20, 8, str(parent))
    child = subprocess.Popen(["/bin/true"], preexec_fn=bounds.join)
    child.wait()
    assert read(Path(bounds.dir) / "cgroup.procs") == str(child.pid)
    assert bounds.pids() == [child.pid]
    bounds.close()  # the process has exited: the rmdir goes through
    assert not Path(bounds.dir).exists() and bounds.dirs == []


@pytest.mark.parametrize(
    ("memory_events", "pids_events", "expected"),
    [
        ("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", "max 0\n", []),
        ("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\n", "max 0\n", ["memory"]),  # an OOM kill
        ("low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n", "max 0\n", []),  # reclaim at the limit, nobody killed
        ("low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", "max 5\n", ["processes"]),  # forks refused
        ("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\n", "max 1\n", ["memory", "processes"]),
    ],
)
def test_v2_reports_which_bound_hit(cgroupfs, tmp_path, memory_events, pids_events, expected) -> None:
    parent = tmp_path / "ours"
    cgroupfs(parent, V2_FILES)
    bounds = CgroupV2Bounds(64 << 20, 8, str(parent))
    (Path(bounds.dir) / "memory.events").write_text(memory_events)
    (Path(bounds.dir) / "pids.events").write_text(pids_events)
    (Path(bounds.dir) / "memory.peak").write_text("12345678\n")
    assert bounds.hits() == expected
    assert bounds.peak_bytes == 12345678
    assert bounds.poll([os.getpid()]) is None  # the kernel enforces: nothing to poll
    bounds.close()


def test_v2_kill_writes_cgroup_kill_and_sweeps_what_is_listed(cgroupfs, tmp_path, sleeper) -> None:
    parent = tmp_path / "ours"
    cgroupfs(parent, V2_FILES)
    bounds = CgroupV2Bounds(64 << 20, 8, str(parent))
    (Path(bounds.dir) / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    bounds.kill_all()
    assert read(Path(bounds.dir) / "cgroup.kill") == "1"
    assert sleeper.wait(timeout=5) == -9  # SIGKILL (the fake kernel ignores cgroup.kill: the sweep did it)
    bounds.close()
    assert list(parent.iterdir()) == []


def test_v2_kill_on_a_kernel_without_cgroup_kill_still_sweeps(cgroupfs, tmp_path, sleeper) -> None:
    parent = tmp_path / "ours"
    cgroupfs(parent, V2_FILES, absent={"cgroup.kill"})  # kernels before 5.14
    bounds = CgroupV2Bounds(64 << 20, 8, str(parent))
    (Path(bounds.dir) / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    bounds.kill_all()
    assert not (Path(bounds.dir) / "cgroup.kill").exists()  # not created by writing to it
    assert sleeper.wait(timeout=5) == -9
    bounds.close()


def test_v2_close_kills_what_is_left_before_removing(cgroupfs, tmp_path, sleeper) -> None:
    """rmdir of a cgroup with a live process is refused (EBUSY): close kills, then removes."""
    parent = tmp_path / "ours"
    cgroupfs(parent, V2_FILES)
    bounds = CgroupV2Bounds(64 << 20, 8, str(parent))
    (Path(bounds.dir) / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    bounds.close()
    assert sleeper.wait(timeout=5) == -9
    assert list(parent.iterdir()) == []


def test_v2_a_refused_limit_removes_the_cgroup_and_raises(cgroupfs, tmp_path) -> None:
    parent = tmp_path / "ours"
    cgroupfs(parent, V2_FILES, broken={"pids.max"})
    with pytest.raises(OSError):
        CgroupV2Bounds(64 << 20, 8, str(parent))
    assert list(parent.iterdir()) == []


def test_call_bounds_falls_back_to_the_budget_when_the_cgroup_cannot_be_made(cgroupfs, tmp_path, monkeypatch) -> None:
    parent = tmp_path / "ours"
    cgroupfs(parent, V2_FILES, broken={"memory.max"})
    monkeypatch.setattr(sandbox_bounds, "detect", lambda: (CgroupV2Bounds, (str(parent),)))
    bounds = call_bounds(200 << 20, 64 << 20, 32)
    assert type(bounds) is CallBounds and not bounds.kernel_enforced
    assert bounds.memory_bytes == 200 << 20  # PSS does not include tmpfs: the mount's size bounds that
    assert list(parent.iterdir()) == []


# ---------------------------------------------------------------------------- cgroup v1


def test_v1_limits_hits_and_removal(cgroupfs, tmp_path, sleeper) -> None:
    memory, pids = tmp_path / "memory" / "ours", tmp_path / "pids" / "ours"
    cgroupfs(memory, V1_MEMORY_FILES)
    cgroupfs(pids, V1_PIDS_FILES)
    bounds = CgroupV1Bounds((200 + 64) << 20, 32, str(memory), str(pids))
    m, p = Path(bounds.memory_dir), Path(bounds.pids_dir)
    assert m.parent == memory and p.parent == pids and m.name == p.name
    assert read(m / "memory.limit_in_bytes") == read(m / "memory.memsw.limit_in_bytes") == str(276824064)
    # v1 charges TCP buffers to no cgroup until a TCP limit is set (issue 31: 1 GB outside the bound)
    assert read(m / "memory.kmem.tcp.limit_in_bytes") == str(276824064)
    assert read(p / "pids.max") == "32"
    assert bounds.hits() == []
    (m / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    (m / "memory.max_usage_in_bytes").write_text("276824064\n")
    (p / "pids.events").write_text("max 4\n")
    assert bounds.hits() == ["memory", "processes"] and bounds.peak_bytes == 276824064
    (p / "cgroup.procs").write_text(f"{sleeper.pid}\n")
    bounds.close()
    assert sleeper.wait(timeout=5) == -9
    assert list(memory.iterdir()) == [] and list(pids.iterdir()) == []


# ---------------------------------------------------------------------------- choosing the mechanism


def delegated_v2(cgroupfs, root: Path) -> Path:
    """Our cgroup v2 directory with memory and pids enabled for its children."""
    ours = root / "ours"
    cgroupfs(ours, V2_FILES)
    (ours / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (ours / "cgroup.subtree_control").write_text("memory pids\n")
    return ours


def v1_dirs(cgroupfs, root: Path) -> dict[str, str]:
    cgroupfs(root / "memory" / "ours", V1_MEMORY_FILES)
    cgroupfs(root / "pids" / "ours", V1_PIDS_FILES)
    return {"memory": str(root / "memory" / "ours"), "pids": str(root / "pids" / "ours")}


def test_choose_prefers_a_delegated_v2(cgroupfs, tmp_path) -> None:
    v2 = delegated_v2(cgroupfs, tmp_path / "unified")
    assert choose(str(v2), v1_dirs(cgroupfs, tmp_path)) == (CgroupV2Bounds, (str(v2),))
    assert [p for p in v2.iterdir() if p.is_dir()] == []  # the probe's cgroup is gone again


def test_choose_v1_when_v2_lacks_memory_or_pids(cgroupfs, tmp_path) -> None:
    """This box: a cgroup2 mount with only hugetlb, and v1 memory and pids hierarchies."""
    v2 = tmp_path / "unified"
    cgroupfs(v2, V2_FILES)
    (v2 / "cgroup.controllers").write_text("hugetlb\n")
    v1 = v1_dirs(cgroupfs, tmp_path)
    assert choose(str(v2), v1) == (CgroupV1Bounds, (v1["memory"], v1["pids"]))
    assert choose(None, v1) == (CgroupV1Bounds, (v1["memory"], v1["pids"]))


def test_choose_skips_a_cgroup_kind_whose_probe_fails(cgroupfs, tmp_path) -> None:
    v2 = tmp_path / "unified" / "ours"
    cgroupfs(v2, V2_FILES, broken={"pids.max"})  # delegated, but the limit cannot be written
    (v2 / "cgroup.subtree_control").write_text("memory pids\n")
    v1 = v1_dirs(cgroupfs, tmp_path)
    assert choose(str(v2), v1) == (CgroupV1Bounds, (v1["memory"], v1["pids"]))


def test_choose_the_budget_without_a_usable_cgroup(cgroupfs, tmp_path) -> None:
    v1 = v1_dirs(cgroupfs, tmp_path)
    assert choose(None, {}) == (CallBounds, ())
    assert choose(None, {"memory": v1["memory"]}) == (CallBounds, ())  # pids not mounted
    assert choose(str(tmp_path / "missing"), {}) == (CallBounds, ())


def test_cgroup_dirs_are_found_from_the_mount_table_and_membership(tmp_path) -> None:
    """A container: each hierarchy is mounted at its own root, a path below the mount's root maps
    below the mount point; controllers not mounted (or not cgroups) are not reported."""
    for d in ("sys/unified/job", "sys/memory/job/7", "sys/pids"):
        (tmp_path / d).mkdir(parents=True)
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        f"30 23 0:26 / {tmp_path}/sys rw,nosuid - tmpfs tmpfs rw,mode=755\n"
        f"41 30 0:38 / {tmp_path}/sys/unified rw,relatime - cgroup2 cgroup2 rw\n"
        f"35 30 0:32 /docker/abc {tmp_path}/sys/memory rw,relatime - cgroup cgroup rw,memory\n"
        f"39 30 0:36 / {tmp_path}/sys/pids rw,relatime - cgroup cgroup rw,pids\n"
    )
    membership = tmp_path / "cgroup"
    membership.write_text("9:name=systemd:/\n8:pids:/\n4:memory:/docker/abc/job/7\n1:cpu,cpuacct:/x\n0::/job\n")
    v2, v1 = sandbox_bounds._cgroup_dirs(str(mountinfo), str(membership))
    assert v2 == f"{tmp_path}/sys/unified/job"
    assert v1 == {"memory": f"{tmp_path}/sys/memory/job/7", "pids": f"{tmp_path}/sys/pids"}
    membership.write_text("4:memory:/docker/abc\n")  # v1 only, no pids, no v2 line
    assert sandbox_bounds._cgroup_dirs(str(mountinfo), str(membership)) == (None, {"memory": f"{tmp_path}/sys/memory"})
