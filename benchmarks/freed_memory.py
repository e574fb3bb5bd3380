"""What `trainer.retain_freed_memory` buys: RL steps with and without it, in alternating processes.

Each round starts two fresh processes one after the other, one with the setting and one without
(it is a process-wide allocator setting, so the two cannot share a process), and each runs the
step of `benchmarks/vs_trl.py` (the default recipe's `micro` model at `--width` x its hidden and
MLP sizes, 8 x 8 completions of 64 forced tokens, PPO-clip, KL 0.05 to a reference): one warm-up
step, then `--steps` timed steps. Printed per round and side: the median CPU seconds per phase,
minor page faults and kernel CPU seconds per step, and the peak RSS; then the median ratio of
the update's time without / with.

    python benchmarks/freed_memory.py [--width 1] [--rounds 3] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, logging, resource, statistics, sys, warnings
sys.path.insert(0, sys.argv[1])
from reinforge.runtime.process_settings import configure_process
configure_process(1, retain_memory=sys.argv[2] == "on")
warnings.filterwarnings("ignore")
logging.getLogger("transformers").setLevel(logging.ERROR)
import vs_trl as V
width, steps = int(sys.argv[3]), int(sys.argv[4])
ours, _ = V.reinforge_alone(width, False, steps + 1)
clock = V.Clock()
ours.step(clock)
clock.take()
phases = {}
before = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(steps):
    ours.step(clock)
    for name, seconds in clock.take()[0].items():
        phases.setdefault(name, []).append(seconds)
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "phases": {name: statistics.median(v) for name, v in phases.items()},
    "faults_per_step": (after.ru_minflt - before.ru_minflt) / steps,
    "kernel_s_per_step": (after.ru_stime - before.ru_stime) / steps,
    "max_rss_mb": after.ru_maxrss / 1024,
}))
"""


def run(side: str, width: int, steps: int) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, here, side, str(width), str(steps)], capture_output=True, text=True, check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=1, help="hidden and MLP sizes as a multiple of micro's")
    parser.add_argument("--rounds", type=int, default=3, help="alternating pairs of processes")
    parser.add_argument("--steps", type=int, default=4, help="timed RL steps per process")
    args = parser.parse_args()
    ratios = []
    for round_ in range(args.rounds):
        result = {side: run(side, args.width, args.steps) for side in ("off", "on")}
        for side, r in result.items():
            phases = ", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items())
            print(f"round {round_} {side:3s}: {phases} CPU-s; {r['faults_per_step']:,.0f} faults and "
                  f"{r['kernel_s_per_step']:.3f} kernel CPU-s per step; peak RSS {r['max_rss_mb']:,.0f} MB", flush=True)
        ratios.append(result["off"]["phases"]["update"] / result["on"]["phases"]["update"])
    print(f"width {args.width}: update without / with retain_freed_memory: {statistics.median(ratios):.2f}x "
          f"(median of {args.rounds} rounds: {' '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
