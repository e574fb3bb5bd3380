"""Nothing outlives a run: after scoring with a reward that never returns (sleeping, or holding the
GIL in a regex), the interpreter exits promptly and leaves no worker process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent
GENEROUS_EXIT_S = 60  # a bound on hanging, not a timing: a healthy exit takes well under a second

SCRIPT = textwrap.dedent(
    """
    import sys
    from hostile_rewards import CATASTROPHIC_PATTERN, sleeps_forever_on_hang
    from reinforge.rewards.builtin import VerifierReward
    from reinforge.rewards.scorer import NamedReward, RewardScorer
    from reinforge.rollout.trajectory import single_turn_trajectory
    from reinforge.tasks.task import Task

    isolation, close = sys.argv[1], sys.argv[2] == "close"
    tasks = {{
        "t": Task(id="t", prompt="p", answer="5"),
        "re": Task(id="re", prompt="p", answer="", verifier="regex", metadata={{"pattern": CATASTROPHIC_PATTERN}}),
    }}
    components = [NamedReward("slow", sleeps_forever_on_hang, 1.0), NamedReward("correct", VerifierReward(), 1.0, spec=("verifier", {{}}))]
    scorer = RewardScorer(components, isolation=isolation, timeout_s=0.5, max_error_fraction=1.0, workers=2)
    # A thread cannot stop a GIL-holding call (nor could the process exit around one): only the
    # worker processes get the catastrophic regex.
    gil = [("re", "y" * 30)] if isolation == "process" else []
    batch = [single_turn_trajectory(tid, [1], [2], [-1.0], text) for tid, text in [("t", "hang"), *gil, ("t", "5")]]
    metrics = scorer.score(tasks, batch)
    verified = scorer.verify_responses([tasks[tid] for tid, _ in gil], [text for _, text in gil]) or [None]
    print("PIDS", *scorer.worker_pids(), flush=True)
    print("FAILED", {{k: v for k, v in metrics.items() if k.startswith("reward_failed/")}}, type(verified[0]).__name__, flush=True)
    if close:
        scorer.close()
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(("isolation", "close"), [("process", "close"), ("process", "no-close"), ("thread", "no-close")])
def test_interpreter_exits_after_hung_rewards(tmp_path: Path, isolation: str, close: str) -> None:
    script = tmp_path / "score.py"
    script.write_text(SCRIPT.format())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    done = subprocess.run(
        [sys.executable, str(script), isolation, close], env=env, capture_output=True, text=True, timeout=GENEROUS_EXIT_S
    )
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert "'reward_failed/slow/timeout': 1.0" in lines["FAILED"]
    if isolation == "process":
        assert "'reward_failed/correct/timeout': 1.0" in lines["FAILED"] and lines["FAILED"].endswith("RewardTimeout")
    for pid in map(int, lines.get("PIDS", "").split()):
        assert not alive(pid), f"reward worker {pid} outlived the interpreter"
