"""examples/guess_number: a multi-turn env of the user's own (guess the number, higher / lower
replies), written against reinforge's Env protocol and named by import path, must LEARN when run
as a user runs it.

The recipe's warm-up imitates a mixed teacher: 35% of its games halve the range (which finds every
secret in 1..16 within the env's 5 guesses), 65% step one at a time from the middle (which finds
only 4..12). Greedy decoding then follows the majority habit, so the warm start solves 9 of the 16
held-out secrets (56.25%, every seed). The recipe's 20 GRPO steps, rewarded for finding the secret
(less for each extra guess), must raise greedy held-out accuracy by at least 25 points (4 secrets)
and the sampled success rate mean@4 by at least 10 points.

Measured with the recipe as shipped (`reinforge train recipe.yaml trainer.seed=S`), seeds
0-3: greedy 56.25% -> 93.75 / 87.5 / 100 / 93.75% (+31 to +44 points); mean@4 0.61 -> 0.84,
0.58 -> 0.80, 0.70 -> 0.86, 0.64 -> 0.88. The test runs seed 0; ~35 s of CPU (one thread).
"""

from __future__ import annotations

import pytest

from example_runs import read_jsonl, run_example


@pytest.mark.slow  # a whole run (~20-100 s); .ci/run runs the slow group of this file
def test_guess_number_env_learns_to_halve_the_range(tmp_path):
    run_dir, done = run_example("guess_number", tmp_path, "trainer.seed=0")

    rows = read_jsonl(run_dir / "metrics.jsonl")
    evals = [r for r in rows if r["stage"] == "eval"]
    before, after = evals[0], evals[-1]
    assert before["step"] == 0 and after["step"] == 20 and before["eval_tasks"] == 16
    assert after["accuracy"] >= before["accuracy"] + 0.25, (before["accuracy"], after["accuracy"])
    assert after["mean@4"] >= before["mean@4"] + 0.10, (before["mean@4"], after["mean@4"])
    # fewer guesses per game once it halves the range
    assert after["turns"] < before["turns"], (before["turns"], after["turns"])

    # The episodes are the env's: guesses answered by "higher" / "lower", one number per turn.
    greedy = read_jsonl(run_dir / "eval_samples.jsonl")
    final = [r for r in greedy if r["step"] == 20]
    assert len(final) == 16
    for record in final:
        turns = record.get("turns") or [{"role": "policy", "text": record["greedy"]}]
        assert [t["role"] for t in turns] == ["policy", "env"] * (len(turns) // 2) + ["policy"]
        assert all(t["text"] in ("higher", "lower") for t in turns if t["role"] == "env")
    steps = [r for r in rows if r["stage"] == "rl"]
    assert all(r["reward/found/mean"] >= 0 for r in steps) and len(steps) == 20
