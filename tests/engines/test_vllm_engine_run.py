"""A shortened default recipe with engine.type=vllm, end to end (marker `vllm`; ~4 min on 2 cores).

The recipe's warm-up, shortened (300 steps: a model that answers in the task's format), then 4 RL
steps whose rollouts and evaluations vLLM samples, with the learner's weights reloaded into it
after every update. With one epoch of one mini-batch (the recipe's), each step's `approx_kl_old`
is KL(behaviour || learner) on the same tokens and the same weights, so it measures the engine's
log-prob gap inside the loop: mean(r - 1 - log r), r = exp(learner - engine), which is at most
max|learner - engine|^2 for gaps below 1, and each gap is within `forward_bound` (vLLM's kernels
are the same float32 math in another order). A wrong temperature, token or weight sync gives
KLs of 1e-2 and more.
"""

from __future__ import annotations

import json

import pytest
import torch

from reinforge.config import load_config
from reinforge.engines.vllm_engine import vllm_available
from reinforge.run.pipeline import run_sft_stage, run_training
from tests.float_bounds import forward_bound

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed: pip install 'reinforge[vllm]' (docs/scaling.md, 'vLLM')"),
]

QUICK = ["task.eval_size=50", "telemetry.progress=false", "telemetry.wandb=off"]
LOGIT_SCALE = 50.0  # |logits| of the default model stay far below this (max ~20 after the recipe's warm-up)


def test_a_short_default_run_samples_with_vllm_and_updates_it(tmp_path) -> None:
    threads = torch.get_num_threads()
    try:
        warm = run_sft_stage(load_config("default", [*QUICK, "sft.steps=300", "sft.batch_size=32", f"trainer.output_dir={tmp_path / 'sft'}"]))
    finally:
        torch.set_num_threads(threads)
    cfg = load_config(
        "default",
        [*QUICK, f"model.path={warm}", "sft.steps=0", "engine.type=vllm", "trainer.steps=4", "eval.every=2",
         "rollout.prompts_per_step=8", f"trainer.output_dir={tmp_path / 'rl'}"],
    )
    outcome = run_training(cfg)

    records = [json.loads(line) for line in (outcome.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["stage"] == "rl"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(warm)
    bound = forward_bound(model, LOGIT_SCALE) ** 2
    kls = [r["approx_kl_old"] for r in steps]
    assert all(abs(kl) <= bound for kl in kls), (kls, bound)  # float rounding can leave it a hair below 0
    assert len([r for r in records if r["stage"] == "eval"]) == 3  # start, step 2, step 4
    assert 0 <= outcome.accuracy_before <= 1 and 0 <= outcome.accuracy_after <= 1
    assert (outcome.run_dir / "final" / "config.json").is_file()
