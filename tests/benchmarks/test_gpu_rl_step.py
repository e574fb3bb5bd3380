"""`benchmarks/gpu_rl_step.py` (scripts/gpu_check.sh's RL-step benchmark) runs on the CPU at tiny
sizes with REINFORGE_GPU_TEST_DEVICE=cpu and writes one JSON whose numbers are consistent with
each other (no timing is asserted: only that the numbers are there and agree)."""

from __future__ import annotations

import json
import math
import os
import sys

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))

import gpu_rl_step  # noqa: E402

PER_MODEL = (
    "params_non_embedding_plus_head", "tokens_per_step", "rollout_s", "update_s", "sync_s", "step_s", "gpus",
    "tokens_per_s_per_gpu", "mfu", "peak_memory_gib", "engine_decode_tokens_per_s", "hf_generate_tokens_per_s",
)


def test_the_tiny_run_writes_one_json_with_every_number(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REINFORGE_GPU_TEST_DEVICE", "cpu")
    monkeypatch.setenv("OUT", str(tmp_path))
    torch.set_num_threads(1)
    returned = gpu_rl_step.main([])
    result = json.loads((tmp_path / "gpu_rl_step.json").read_text())
    assert result == json.loads(json.dumps(returned))
    assert result["machine"]["tiny"] is True
    assert 0 < result["estimate_s"] <= 480, "the full-size run must fit gpu_check's 8 minutes"
    sizes = gpu_rl_step.TINY_SIZES
    assert list(result["models"]) == list(gpu_rl_step.QWEN_SHAPES)
    for name, numbers in result["models"].items():
        assert set(PER_MODEL) <= set(numbers), name
        # Every row: its prompt and exactly `length` sampled tokens (no stop token ends one early).
        assert numbers["tokens_per_step"] == sizes["completions"] * (sizes["prompt_length"] + sizes["length"])
        assert 0 < numbers["rollout_s"] <= numbers["step_s"] and 0 < numbers["update_s"] <= numbers["step_s"]
        assert math.isclose(numbers["tokens_per_s_per_gpu"], numbers["tokens_per_step"] / numbers["step_s"])
        assert math.isclose(numbers["engine_decode_tokens_per_s"], sizes["completions"] * sizes["length"] / numbers["rollout_s"])
        assert numbers["hf_generate_tokens_per_s"] > 0
        assert numbers["mfu"] is None and numbers["peak_memory_gib"] is None, "no card: no peak to divide by, no GPU memory"


def test_the_parameter_count_is_the_published_models() -> None:
    """6 x params x tokens needs the right params: the shapes built (on the meta device, no memory)
    have Qwen2.5-0.5B's 494M and -1.5B's 1.54B parameters, and the closed form the estimate uses agrees."""
    published = {"qwen2.5-0.5b-shape": 494_032_768, "qwen2.5-1.5b-shape": 1_543_714_304}
    for name, shape in gpu_rl_step.QWEN_SHAPES.items():
        with torch.device("meta"):
            model = Qwen2ForCausalLM(Qwen2Config(**shape))
        assert gpu_rl_step.non_embedding_params(model) == gpu_rl_step.shape_params(shape) == published[name]
