"""End to end: the tool-agent recipe, shrunk. RL must teach the agent to use its calculator.

A micro Llama is warmed up on 3-digit x 2-digit products where 40% of the demonstrations call the
calculator (<<calculator: a*b>>, then copy the result) and 60% state the product directly,
which a model this small cannot compute. Greedy decoding then mostly answers directly and
wrongly. 10 GRPO steps with the product's verifier as the only reward must raise held-out
greedy accuracy by at least 15 points (seed 0), and the greedy tool-call rate with it (measured
on an idle 2-core box: 45% -> 82% accuracy, tool-call rate 57% -> 100%, 73 s in all, on two threads).
The run keeps the default single torch thread, as every test of the default suite: pinned to two
threads it took 1,310 s at load 8.
"""

from __future__ import annotations

import json

import pytest
import torch

from reinforge.config import load_config
from reinforge.run.pipeline import run_training

SHRUNK = [
    "task.train_size=4000", "task.eval_size=100", "task.params={op: '*', digits: 3, digits_b: 2, tool_traces: 0.4}",
    "sft.steps=400", "sft.batch_size=32", "rollout.prompts_per_step=16", "trainer.steps=10", "eval.every=10",
    "eval.samples=1", "trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false",
]


@pytest.mark.slow  # a whole run (~20-100 s); .ci/run runs the slow group of this file
def test_rl_teaches_the_agent_to_call_its_calculator(tmp_path):
    cfg = load_config("tool-agent", [*SHRUNK, f"trainer.output_dir={tmp_path / 'run'}"])
    outcome = run_training(cfg)
    assert torch.get_num_threads() == 1  # trainer.threads' default: the suite's runs stay on one thread
    before, after = outcome.rl.evals[0], outcome.rl.evals[-1]

    assert outcome.accuracy_after >= outcome.accuracy_before + 0.15, (outcome.accuracy_before, outcome.accuracy_after)
    assert after["tool_call_rate"] >= before["tool_call_rate"] + 0.15, (before["tool_call_rate"], after["tool_call_rate"])
    assert after["valid_call_rate"] >= 0.9
    # the training metrics carry the tool use of every step
    steps = [json.loads(line) for line in (outcome.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all("tool_call_rate" in s and "valid_call_rate" in s for s in steps if s["stage"] == "rl")
    # episodes that called the tool are recorded turn by turn, the call and its result set apart
    evals = [json.loads(line) for line in (outcome.run_dir / "eval_samples.jsonl").read_text().splitlines()]
    episode = next(r for r in evals if r.get("turns") and r["correct"])
    assert [t["role"] for t in episode["turns"]] == ["policy", "tool", "policy"]
    assert episode["turns"][0]["text"].startswith("<<calculator:") and episode["turns"][1]["text"] == episode["answer"]
