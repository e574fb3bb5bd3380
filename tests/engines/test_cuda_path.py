"""The CUDA path: engine, learner, reference, critic and a whole run on a GPU (`pytest -m gpu`).

Skipped where torch sees no GPU. The same file checks its own logic on the CPU with
REINFORGE_GPU_TEST_DEVICE=cpu (every test then runs there), so a GPU machine is not the first
place these tests ever execute.
"""

from __future__ import annotations

import copy
import json
import os

import pytest
import torch

from reinforge.algos.policy_loss import ppo_clip_loss
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.learner.batch import collate
from reinforge.learner.critic_learner import CriticLearner
from reinforge.learner.policy_learner import PolicyLearner, compute_logprobs
from reinforge.learner.reference import ReferenceModel
from reinforge.models.value_model import ValueModel
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task
from float_bounds import logit_bound

DEVICE = os.environ.get("REINFORGE_GPU_TEST_DEVICE", "cuda")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        DEVICE.startswith("cuda") and not torch.cuda.is_available(),
        reason="needs a CUDA GPU (torch sees none); run on a GPU machine with `python -m pytest -m gpu tests/engines/test_cuda_path.py`",
    ),
]

TEXTS = ["1+2=", "35+7=", "123+456=", "9=", "80+801="]


def sample(engine, tokenizer, group: int = 3, max_new: int = 8, seed: int = 5):
    env = SingleTurnEnv(tokenizer, "raw")
    tasks = [Task(id=f"t{i}", prompt=t, answer="0") for i, t in enumerate(TEXTS)]
    params = SamplingParams(max_new, 1.0, stop_token_ids=(tokenizer.eos_token_id,))
    trajectories = rollout_groups(engine, env, tasks, group, params, seed=seed)
    advantages = torch.linspace(-1, 1, len(trajectories))
    return collate(trajectories, advantages, tokenizer.pad_token_id), trajectories


def on_device(model):
    return copy.deepcopy(model).to(DEVICE).eval()


@pytest.mark.parametrize("fused", [True, False])
def test_engine_on_the_gpu_samples_what_the_learner_scores(sharp_nano_model, tokenizer, fused) -> None:
    model = on_device(sharp_nano_model)
    engine = TorchEngine(model, tokenizer.pad_token_id, fused=fused)
    batch, trajectories = sample(engine, tokenizer)
    assert batch.input_ids.device.type == "cpu"  # trajectories and batches live on the CPU
    mask = batch.loss_mask
    learner = compute_logprobs(model, batch, 64, 1.0)
    assert learner.device.type == "cpu"
    bound = logit_bound(sharp_nano_model, [t.token_ids for t in trajectories])
    gap = (learner - batch.old_logprobs)[mask].abs().max().item()
    assert gap < max(bound, 1e-4), f"engine vs learner log-prob gap {gap:.2e} on {DEVICE}"
    # The same seed draws the same uniforms on every device: a CPU engine picks the same tokens
    # wherever the two distributions agree to float noise (all of them at this model's scale).
    cpu_batch, _ = sample(TorchEngine(sharp_nano_model, tokenizer.pad_token_id, fused=fused), tokenizer)
    assert torch.equal(cpu_batch.input_ids, batch.input_ids)


def test_bf16_engine_on_the_gpu_stays_close_to_the_fp32_learner(sharp_nano_model, tokenizer) -> None:
    model = on_device(sharp_nano_model)
    engine = TorchEngine(model, tokenizer.pad_token_id, dtype="bfloat16")
    batch, _ = sample(engine, tokenizer)
    mask = batch.loss_mask
    gap = (compute_logprobs(model, batch, 64, 1.0) - batch.old_logprobs)[mask].abs()
    # bf16 keeps 8 bits of mantissa: log-probs move by a few 1e-2 on this peaked model, not by more.
    assert gap.mean().item() < 0.1 and torch.isfinite(gap).all()


def test_one_rl_update_with_reference_and_critic_on_the_gpu_matches_the_cpu(sharp_nano_model, tokenizer) -> None:
    cpu_model = copy.deepcopy(sharp_nano_model).eval()
    gpu_model = on_device(sharp_nano_model)
    batch, _ = sample(TorchEngine(cpu_model, tokenizer.pad_token_id), tokenizer)

    def loss_fn(new, entropy, micro, norm):
        return ppo_clip_loss(new, micro.old_logprobs, micro.advantages, micro.loss_mask, 0.2, normalizer=norm.num_tokens)

    results = {}
    for name, model in (("cpu", cpu_model), ("gpu", gpu_model)):
        reference = ReferenceModel(model, micro_batch_size=4)
        learner = PolicyLearner(model, lr=1e-3, micro_batch_size=4)
        critic = CriticLearner(ValueModel.from_policy(model), lr=1e-3, micro_batch_size=4)
        ref = reference.logprobs(batch)
        values = critic.values(batch)
        metrics = learner.train_step(batch, loss_fn)
        critic_metrics = critic.train_step(batch, values + 0.5 * batch.loss_mask, values)
        results[name] = (ref, values, metrics, critic_metrics, {k: v.detach().cpu() for k, v in model.state_dict().items()})
    (ref_c, val_c, m_c, cm_c, w_c), (ref_g, val_g, m_g, cm_g, w_g) = results["cpu"], results["gpu"]
    mask = batch.loss_mask
    assert ref_g.device.type == "cpu" and val_g.device.type == "cpu"
    assert torch.allclose(ref_g[mask], ref_c[mask], atol=1e-4)
    assert torch.allclose(val_g, val_c, atol=1e-4)
    assert m_g["grad_norm"] == pytest.approx(m_c["grad_norm"], rel=1e-3)
    assert cm_g["value_loss"] == pytest.approx(cm_c["value_loss"], rel=1e-3, abs=1e-6)
    # One AdamW step moves each weight by ~lr: the two devices agree far inside that.
    moved = max((w_c[k] - sharp_nano_model.state_dict()[k]).abs().max().item() for k in w_c)
    assert moved > 1e-4
    assert max((w_g[k] - w_c[k]).abs().max().item() for k in w_c) < moved / 10


def test_a_tiny_run_on_the_gpu_with_lora(tmp_path) -> None:
    pytest.importorskip("peft", reason="LoRA needs the peft package: pip install 'reinforge[lora]'")
    from reinforge.cli import main

    run = tmp_path / "run"
    code = main([
        "train", "--output", str(run), "model.preset=nano", "task.train_size=64", "task.eval_size=8", "sft.steps=10",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "trainer.steps=2", "eval.samples=1", "algo.kl_coef=0.05",
        "algo.bf16_autocast=true", "rollout.engine_dtype=bfloat16", "model.lora.r=4", f"model.device={DEVICE}",
        "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb=off",
    ])
    assert code == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["stage"] == "rl"] == [1, 2]
    assert all(r["grad_norm"] == r["grad_norm"] for r in rows if r["stage"] == "rl")  # not NaN
    assert (run / "final" / "model.safetensors").is_file() and (run / "final" / "adapter").is_dir()
