"""Per-step cost of scoring in worker processes vs threads, on the default recipe's reward volume:
256 samples (32 prompts x 8) of 2-digit sums, one cheap verifier component (`verifier`), cache off
so every sample is a call. Prints the median seconds per step of each, over `--steps` steps, after
one warm-up step (worker start-up is paid once per run, and reported apart).

    python benchmarks/reward_isolation.py [--steps 20] [--workers 4]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from reinforge.rewards.builtin import VerifierReward
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.rollout.trajectory import single_turn_trajectory
from reinforge.tasks.task import Task


def step_batch(rng: random.Random) -> tuple[dict[str, Task], list]:
    tasks, batch = {}, []
    for p in range(32):
        a, b = rng.randrange(100), rng.randrange(100)
        task = Task(id=f"{a}+{b}", prompt=f"{a}+{b}=", answer=str(a + b), verifier="numeric")
        tasks[task.id] = task
        for _ in range(8):
            answer = str(a + b + rng.choice([0, 0, 1, -1]))
            sampled = list(range(10, 10 + rng.randrange(4, 12)))
            batch.append(single_turn_trajectory(task.id, list(range(8)), sampled, [-0.3] * len(sampled), f"<answer>{answer}</answer>", "stop", p))
    return tasks, batch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    for isolation in ("thread", "process"):
        scorer = RewardScorer(
            [NamedReward("correct", VerifierReward(), 1.0, spec=("verifier", {}))], workers=args.workers, isolation=isolation
        )
        rng = random.Random(0)
        start = time.perf_counter()
        scorer.score(*step_batch(rng))
        first = time.perf_counter() - start
        times = []
        for _ in range(args.steps):
            tasks, batch = step_batch(rng)
            start = time.perf_counter()
            scorer.score(tasks, batch)
            times.append(time.perf_counter() - start)
        scorer.close()
        print(f"{isolation:8s} first step {first * 1e3:7.1f} ms (with worker start-up), then median {statistics.median(times) * 1e3:6.1f} ms "
              f"per step (min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}) for 256 calls, {args.workers} workers")


if __name__ == "__main__":
    main()
