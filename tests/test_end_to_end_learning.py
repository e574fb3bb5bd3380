"""End to end: warm-up, then GRPO on the default task family; RL must raise held-out accuracy.

The default recipe (two-digit addition, seed 0) with 30 RL steps instead of 150 and 200
held-out problems instead of 500. The warm-up imitates a teacher that drops carries in 60% of
its answers, so greedy accuracy starts low (~35%: mostly the carry-free problems); the verifier
reward must lift it by at least 20 points within 30 RL steps.
"""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from reinforge.config import load_config
from reinforge.trainer.pipeline import run_training


def test_grpo_raises_held_out_accuracy_and_writes_a_complete_run(tmp_path):
    cfg = load_config(
        "default",
        [
            f"trainer.output_dir={tmp_path / 'run'}",
            "task.eval_size=200",
            "trainer.steps=30",
            "eval.every=15",
            "trainer.sample_every=10",
            "telemetry.progress=false",
        ],
    )
    outcome = run_training(cfg)

    # Learning happened: held-out greedy accuracy and the training reward both rose.
    assert outcome.accuracy_after >= outcome.accuracy_before + 0.20, (outcome.accuracy_before, outcome.accuracy_after)
    rewards = outcome.rl.rewards
    assert sum(rewards[-5:]) / 5 >= sum(rewards[:5]) / 5 + 0.05, rewards

    run = outcome.run_dir
    assert (run / "config.yaml").is_file()
    stages = {json.loads(line)["stage"] for line in (run / "metrics.jsonl").read_text().splitlines()}
    assert stages == {"sft", "rl", "eval"}
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all({"prompt", "response", "reward", "policy_version"} <= s.keys() for s in samples)
    assert any((run / "tensorboard").iterdir())

    # The final model opens with plain transformers and answers a held-out-style prompt.
    model = AutoModelForCausalLM.from_pretrained(run / "final")
    tokenizer = AutoTokenizer.from_pretrained(run / "final")
    ids = tokenizer("12+34=", return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=4, do_sample=False, eos_token_id=tokenizer.eos_token_id)
    assert tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip() == "46"
