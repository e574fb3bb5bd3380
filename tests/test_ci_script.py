""".ci/run runs every test group even when an earlier one failed, and fails at the end if any did.

The script is run for real by bash, in a copy of the repository's layout, with every command it
calls from outside (python3, pip, python, apt-get, ...) replaced by a fake on PATH that records its
arguments; a pytest run's exit status is chosen per group by the test.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A fake `python` inside a venv: `-m pytest ARGS` exits with $FAKE_PYTEST_RC_<group>, where the group
# is the -m marker expression's first word (main: no -m); everything else succeeds.
FAKE_PYTHON = """#!/bin/bash
echo "python $*" >> "$FAKE_LOG"
if [[ "$1 $2" == "-m pytest" ]]; then
    group=main
    args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do
        [[ "${args[i]}" == "-m" && "${args[i+1]}" != pytest ]] && group="${args[i+1]%% *}"
    done
    rc_var="FAKE_PYTEST_RC_$group"
    exit "${!rc_var:-0}"
fi
exit 0
"""

# The system python3: `-m venv DIR` makes a venv of fakes; `-c CHECK` (the script's probes) succeeds.
FAKE_PYTHON3 = """#!/bin/bash
echo "python3 $*" >> "$FAKE_LOG"
if [[ "$1" == "-m" && "$2" == "venv" ]]; then
    mkdir -p "$3/bin"
    cp "$FAKE_BIN/.venv-python" "$3/bin/python"
    printf '#!/bin/bash\\necho "pip $*" >> "$FAKE_LOG"\\n' > "$3/bin/pip"
    chmod +x "$3/bin/python" "$3/bin/pip"
    printf 'export PATH="%s/bin:$PATH"\\n' "$3" > "$3/bin/activate"
fi
exit 0
"""


@pytest.fixture
def ci(tmp_path):
    """Run a copy of .ci/run with fakes; returns (exit code, output, the commands called)."""
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / ".venv-python").write_text(FAKE_PYTHON)
    (fake_bin / "python3").write_text(FAKE_PYTHON3)
    for name in ("gcc", "bwrap", "apt-get", "sudo"):
        (fake_bin / name).write_text('#!/bin/bash\necho "%s $*" >> "$FAKE_LOG"\n[[ "$0" == *sudo ]] && exec "$@"\nexit 0\n' % name)
    for path in fake_bin.iterdir():
        path.chmod(0o755)
    log = tmp_path / "calls.log"

    def run(**rcs: int):
        env = {
            "PATH": f"{fake_bin}:/usr/bin:/bin", "HOME": str(tmp_path), "FAKE_LOG": str(log), "FAKE_BIN": str(fake_bin),
            "VENV": str(tmp_path / "venv"), "VLLM_VENV": str(tmp_path / "venv-vllm"),
            **{f"FAKE_PYTEST_RC_{group}": str(rc) for group, rc in rcs.items()},
        }
        done = subprocess.run(["/bin/bash", str(repo / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)
        calls = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        return done.returncode, done.stdout + done.stderr, [c for c in calls if " -m pytest" in c]

    return run


def test_every_group_runs_and_all_passing_passes(ci) -> None:
    rc, out, pytest_runs = ci()
    assert rc == 0, out
    assert pytest_runs[0] == "python -m pytest -q"  # the README's command, exactly, first
    assert pytest_runs[-1] == "python -m pytest -q -m vllm"
    assert "every group passed" in out


def test_a_failing_main_suite_still_runs_and_reports_every_other_group(ci) -> None:
    _, _, all_runs = ci()
    rc, out, pytest_runs = ci(main=1)
    assert rc != 0
    assert pytest_runs == all_runs and "python -m pytest -q -m vllm" in pytest_runs  # run after the main suite failed
    assert "FAILED: the main suite" in out and "vLLM group" not in out


def test_a_failing_vllm_group_fails_the_run(ci) -> None:
    rc, out, _ = ci(vllm=1)
    assert rc != 0 and "FAILED: the vLLM group" in out and "main suite" not in out
    rc, out, _ = ci(main=1, vllm=1)
    assert rc != 0 and "FAILED: the main suite" in out and "FAILED: the vLLM group" in out

