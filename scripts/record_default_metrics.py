"""Record the default recipe's metric history for the monitors' quiet-run test:
python scripts/record_default_metrics.py [--run-dir DIR]

Runs `reinforge train` with the default recipe (seed 0, one thread: ~2.5 minutes on an idle
2-core box) into DIR (default: a temporary directory), or reads DIR when it already holds a
finished run, and writes tests/monitors/default_run_metrics.jsonl: the `rl` and `eval` rows of its
metrics.jsonl with only the metrics the detectors read (reinforge.monitors), so the fixture stays
small. tests/monitors/test_quiet_on_default_run.py replays it through the detectors step by step
and asserts that none fires with the default thresholds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "monitors" / "default_run_metrics.jsonl"
# What the detectors read: reinforge/monitors/*.py (reward/<name>/mean for format hacking).
WATCHED = ("entropy", "kl_ref", "clip_frac", "logprob_gap/abs_mean", "response_length", "reward",
           "identical_response_group_frac", "duplicate_response_group_frac", "zero_variance_group_frac",
           "sampled_zero_variance_group_frac", "accuracy")


def kept(key: str) -> bool:
    return key in ("stage", "step") or key in WATCHED or (key.startswith("reward/") and key.endswith("/mean"))


def record(run_dir: Path) -> int:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [{k: v for k, v in r.items() if kept(k)} for r in rows if r["stage"] in ("rl", "eval")]
    FIXTURE.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", help="a finished default-recipe run to read, or where to train one")
    args = parser.parse_args()
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="default-run-"))
    if not (run_dir / "final").is_dir():
        cmd = [sys.executable, "-m", "reinforge.cli", "train", "--output", str(run_dir), "telemetry.progress=false"]
        subprocess.run(cmd, check=True)
    print(f"wrote {record(run_dir)} rows from {run_dir} to {FIXTURE}")


if __name__ == "__main__":
    main()
