"""End to end, slow: the gateway-agent recipe, shrunk. RL through the gateway must teach an agent
program written only with the openai client to use its calculator.

A micro Llama is warmed up on 3-digit x 2-digit products laid out as the agent's requests render,
where 40% of the demonstrations call the calculator and 60% state the product directly (which a
model this small cannot compute); greedy decoding then mostly answers directly and wrongly. 15
GRPO steps, the agent (examples/gateway_agent/agent.py) running in its own process against the
run's gateway, must raise held-out greedy accuracy by at least 15 points over the warm-up's (seed 0).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reinforge.config import load_config
from reinforge.run.pipeline import run_training

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "gateway-agent.yaml"  # names ../examples/gateway_agent/agent.py
SHRUNK = [
    "task.train_size=4000", "task.eval_size=100", "task.params={op: '*', digits: 3, digits_b: 2, tool_traces: 0.4}",
    "sft.steps=400", "sft.batch_size=32", "rollout.prompts_per_step=16", "trainer.steps=15", "eval.every=15",
    "eval.samples=1", "trainer.checkpoint_every=0", "telemetry.progress=false", "telemetry.tensorboard=false",
    "telemetry.wandb=off",
]


@pytest.mark.slow
def test_rl_through_the_gateway_teaches_the_agent_to_call_its_calculator(tmp_path):
    cfg = load_config(str(RECIPE), [*SHRUNK, f"trainer.output_dir={tmp_path / 'run'}"])
    outcome = run_training(cfg)

    assert outcome.accuracy_after >= outcome.accuracy_before + 0.15, (outcome.accuracy_before, outcome.accuracy_after)
    before, after = outcome.rl.evals[0], outcome.rl.evals[-1]
    assert after["tool_call_rate"] >= before["tool_call_rate"] + 0.15, (before["tool_call_rate"], after["tool_call_rate"])
    # the agent only appends to its history: every episode stays one token-exact trajectory
    steps = [json.loads(line) for line in (outcome.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(s["env/splits"] == 0 for s in steps if s["stage"] == "rl")
