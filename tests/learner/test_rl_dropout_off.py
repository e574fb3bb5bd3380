"""Dropout is off for RL: a model with dropout (GPT-2's 0.1) samples, is scored and is updated in
eval mode, so the first update's ratio pi_theta / pi_old is exactly 1 (float noise aside) and no
token is clipped. With dropout on, that first step showed ratio 0.93 and clip fraction 0.11.
Supervised warm-up keeps the model's dropout."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from reinforge.algos.advantages import get_estimator
from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task
from reinforge.trainer.advantage_step import has_active_dropout, prepare_batch
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.trainer.sft import run_sft

TASKS = [Task(id=f"t{i}", prompt=p, answer=a) for i, (p, a) in enumerate([("1+2=", "3"), ("35+7=", "42"), ("9+9=", "18")])]


def gpt2_with_dropout(tokenizer) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    return GPT2LMHeadModel(config)


def record_modes(model: torch.nn.Module) -> list[bool]:
    """The mode of every dropout layer each time it runs (the learner may call the decoder rather
    than the whole model: reinforge.learner.logprobs)."""
    modes: list[bool] = []
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    return modes


def test_first_rl_step_has_ratio_one_and_no_clipping_with_dropout_in_the_config(tokenizer) -> None:
    model = gpt2_with_dropout(tokenizer)
    assert has_active_dropout(model)
    algo = load_config("default", []).algo
    engine = TorchEngine(model, tokenizer.pad_token_id)
    params = SamplingParams(max_new_tokens=8, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))
    trajectories = rollout_groups(engine, SingleTurnEnv(tokenizer, "raw"), TASKS, 4, params, seed=3)
    for i, t in enumerate(trajectories):
        t.reward = t.rewards["correct"] = float(i % 3 == 0)  # mixed rewards: nonzero advantages
    learner = PolicyLearner(model, lr=1e-3, max_response_tokens=8)
    estimator = get_estimator(algo.advantage)
    batch, _ = prepare_batch(trajectories, algo, estimator, {"correct": 1.0}, tokenizer.pad_token_id, learner, None, None)

    # The dropout is real: a train-mode forward gives other log-probs than the sampling policy's.
    model.train()
    with torch.no_grad():
        from reinforge.learner.logprobs import token_logprobs

        noisy, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    assert (noisy - batch.old_logprobs[:, : noisy.shape[1]]).abs().mul(batch.loss_mask).max() > 1e-3

    modes = record_modes(model)
    metrics = learner.train_step(batch, make_policy_objective(algo))
    assert modes and not any(modes), "the RL update ran a forward in train mode (dropout on)"
    assert metrics["clip_frac"] == 0.0
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # engine vs learner kernels: float noise only
    assert metrics["approx_kl_old"] == pytest.approx(0.0, abs=1e-6)


def test_supervised_warm_up_keeps_the_model_dropout(tokenizer) -> None:
    model = gpt2_with_dropout(tokenizer)
    modes = record_modes(model)
    cfg = load_config("default", ["sft.steps=1", "sft.batch_size=2"]).sft
    run_sft(model, SingleTurnEnv(tokenizer, "raw"), TASKS, cfg, seed=0)
    assert modes and all(modes)
