"""Several policies on vLLM (the describer-guesser recipe, engine.type=vllm; marker `vllm`): each
policy has its own vLLM engine process, samples its own seats with it, and reloads its own weights
into it after every update.

With one epoch of one mini-batch, the update's own forward is on the weights that sampled, and each
policy logs the engine's log-prob gap to it on its own tokens (`logprob_gap/abs_max`) and
approx_kl_old = KL(behaviour || learner) (tests/engines/test_vllm_engine_run.py): within the float
bound of the same weights computed in another order (measured: gaps of 5e-7 against a bound of
5e-3). An engine with the other policy's weights gives gaps of 0.03 (the two warm starts) to 0.37
(after 3 steps), one that kept the warm start 0.27 to 0.55: far above it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from reinforge.engines import vllm_engine
from reinforge.run.pipeline import run_training
from float_bounds import forward_bound
from test_several_policies import MICRO, config
from test_several_policies_parts import NAMES, rl_rows

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_engine.vllm_available(), reason="vLLM is not installed: pip install 'reinforge[vllm]' (docs/scaling.md, 'vLLM')"),
]

LOGIT_SCALE = 50.0  # |logits| of the micro model after a 2-step warm-up stay far below this


def test_two_policies_each_sample_with_a_vllm_engine_of_their_own(tmp_path: Path, monkeypatch) -> None:
    starts: list[int] = []  # each engine's process, as it starts
    original = vllm_engine.VllmEngine.__init__

    def spy(self, *args, **kwargs):
        original(self, *args, **kwargs)
        starts.append(self.pid())

    monkeypatch.setattr(vllm_engine.VllmEngine, "__init__", spy)
    run_dir = tmp_path / "run"
    # The micro model: the nano model's head dimension (16) is not one vLLM's CPU attention serves.
    run_training(config(*MICRO, "model.preset=micro", "engine.type=vllm", "engine.startup_timeout_s=900", f"trainer.output_dir={run_dir}"))
    assert len(starts) == 2 and len(set(starts)) == 2  # an engine process per policy
    rows = rl_rows(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    for name in NAMES:
        bound = forward_bound(AutoModelForCausalLM.from_pretrained(run_dir / "warm_start" / name), LOGIT_SCALE)
        gaps = [r[f"policy/{name}/logprob_gap/abs_max"] for r in rows]
        assert all(0 <= gap <= bound for gap in gaps), (name, gaps, bound)
        kls = [r[f"policy/{name}/approx_kl_old"] for r in rows]
        assert all(abs(kl) <= bound**2 for kl in kls), (name, kls, bound**2)
        assert sum(r[f"policy/{name}/response_length"] for r in rows) > 0  # it sampled tokens of its own
        final = load_file(run_dir / "final" / name / "model.safetensors")
        warm = load_file(run_dir / "warm_start" / name / "model.safetensors")
        assert any(not torch.equal(final[k], v) for k, v in warm.items()), f"{name} did not train"
