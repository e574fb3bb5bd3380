"""algo.compile_forward: the compiled learner / reference forward against the eager one.

Marked slow: inductor compiles C++ kernels, a minute or more on a busy 2-core box."""

from __future__ import annotations

import copy
import shutil

import pytest
import torch

from reinforge.algos.policy_loss import ppo_clip_loss
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.learner.batch import collate
from reinforge.learner.policy_learner import PolicyLearner, compute_logprobs
from reinforge.learner.reference import ReferenceModel

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None, reason="inductor needs a C++ compiler"),
]


def _loss(logprobs, entropy, micro, norm):
    return ppo_clip_loss(logprobs, micro.old_logprobs, micro.advantages, micro.loss_mask, 0.2, normalizer=norm.num_tokens)


def test_compiled_forward_matches_eager_and_trains_alike(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    eager_model, compiled_model = copy.deepcopy(sharp_nano_model), copy.deepcopy(sharp_nano_model)
    pad = tokenizer.pad_token_id
    engine = TorchEngine(eager_model, pad)
    # rows of different lengths: stop tokens end some early, so the batch is right-padded
    params = SamplingParams(max_new_tokens=12, temperature=1.0, stop_token_ids=[tokenizer.eos_token_id])
    trajectories = []
    for prompt, generation in zip(arithmetic_prompts[:8], engine.generate(arithmetic_prompts[:8], params, seed=0)):
        trajectories.append(_trajectory(prompt, generation))
    batch = collate(trajectories, torch.linspace(-1, 1, len(trajectories)), pad)

    eager = PolicyLearner(eager_model, lr=1e-3, micro_batch_size=4)
    compiled = PolicyLearner(compiled_model, lr=1e-3, micro_batch_size=4, compile_forward=True)
    reference = ReferenceModel(compiled_model, micro_batch_size=4, compile_forward=True)  # a copy of a compiled model
    mask = batch.loss_mask
    before = eager.logprobs(batch)
    assert (compiled.logprobs(batch) - before)[mask].abs().max() <= 1e-5
    assert (reference.logprobs(batch) - before)[mask].abs().max() <= 1e-5

    eager_metrics, compiled_metrics = eager.train_step(batch, _loss), compiled.train_step(batch, _loss)
    assert compiled_metrics["grad_norm"] == pytest.approx(eager_metrics["grad_norm"], rel=1e-4)
    after = compute_logprobs(eager_model, batch, 4, 1.0)
    assert (after - before)[mask].abs().max() > 1e-4  # the step moved the policy...
    assert (compiled.logprobs(batch) - after)[mask].abs().max() <= 1e-4  # ...and both moved it alike
    assert set(compiled_model.state_dict()) == set(eager_model.state_dict())  # checkpoints keep their names


def _trajectory(prompt, generation):
    from reinforge.rollout.trajectory import Trajectory

    sampled = generation.token_ids
    return Trajectory(
        task_id="t", group_id=0, token_ids=prompt + sampled,
        loss_mask=[False] * len(prompt) + [True] * len(sampled),
        behaviour_logprobs=[0.0] * len(prompt) + generation.logprobs,
        turn_spans=[(len(prompt), len(prompt) + len(sampled))], prompt_length=len(prompt),
        response_text="", policy_version=0, finish_reason=generation.finish_reason,
    )
