"""Invariant 1: the learner's log-probs on stored trajectories equal the engine's behaviour log-probs.

The engine samples with left padding through the fused decoder (or the HF fallback); the learner
re-reads the same token ids, right-padded, through the plain `transformers` forward. If anything
differs (positions, masks, temperature, a re-tokenisation, an off-by-one in the loss mask) the
importance ratios of every policy-gradient update are silently wrong.
"""

from __future__ import annotations

import pytest
import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.learner.batch import collate
from reinforge.learner.logprobs import token_logprobs
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task
from float_bounds import logit_bound

TEXTS = ["1+2=", "35+7=", "123+456=", "9=", "80+801="]
GROUP = 3
MAX_NEW = 10


def make_tasks() -> list[Task]:
    return [Task(id=f"t{i}", prompt=text, answer="0") for i, text in enumerate(TEXTS)]


def frequent_stop_tokens(engine, env, tasks) -> tuple[int, ...]:
    """Tokens the model emits early, so responses end at different lengths (ragged batch)."""
    probe = engine.generate([env.prompt_ids(t) for t in tasks], SamplingParams(max_new_tokens=3, temperature=0.0))
    return tuple(sorted({g.token_ids[1] for g in probe[:2]} | {env.tokenizer.eos_token_id}))


@pytest.mark.parametrize(
    "temperature, top_k, top_p, fused",
    [
        (1.0, 0, 1.0, True),
        (0.7, 0, 1.0, True),
        (0.7, 5, 1.0, True),
        (1.0, 10, 0.9, True),
        (1.3, 3, 1.0, True),
        (0.7, 5, 1.0, False),
    ],
)
def test_learner_logprobs_equal_behaviour_logprobs(sharp_nano_model, tokenizer, temperature, top_k, top_p, fused) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id, fused=fused)
    env = SingleTurnEnv(tokenizer, "raw")
    tasks = make_tasks()
    stop = frequent_stop_tokens(engine, env, tasks)
    params = SamplingParams(MAX_NEW, temperature, top_p, top_k, stop)

    trajectories = rollout_groups(engine, env, tasks, GROUP, params, seed=11)
    assert len({len(t.token_ids) for t in trajectories}) > 1  # ragged: padding is exercised
    assert any(t.finish_reason == "stop" for t in trajectories)

    # tokens in, tokens out: prompt ids + exactly the sampled ids, never re-tokenised text
    generations = engine.generate([env.prompt_ids(t) for t in tasks for _ in range(GROUP)], params, seed=11)
    for trajectory, generation in zip(trajectories, generations):
        prompt = env.prompt_ids(tasks[int(trajectory.task_id[1:])])
        assert trajectory.token_ids == prompt + generation.token_ids
        assert trajectory.prompt_length == len(prompt)
        assert trajectory.loss_mask == [False] * len(prompt) + [True] * len(generation.token_ids)
        assert trajectory.behaviour_logprobs[len(prompt) :] == generation.logprobs

    batch = collate(trajectories, torch.zeros(len(trajectories)), tokenizer.pad_token_id)
    # the loss mask covers exactly the sampled tokens, shifted onto the predicting position
    assert batch.num_loss_tokens == sum(len(g.token_ids) for g in generations)
    for row, t in enumerate(trajectories):
        expected = torch.zeros(batch.loss_mask.shape[1], dtype=torch.bool)
        expected[t.prompt_length - 1 : len(t.token_ids) - 1] = True
        assert torch.equal(batch.loss_mask[row], expected)

    with torch.no_grad():
        new_logprobs, entropy = token_logprobs(sharp_nano_model, batch.input_ids, batch.attention_mask, temperature)
    assert new_logprobs.shape == batch.old_logprobs.shape
    mask = batch.loss_mask
    diff = (new_logprobs - batch.old_logprobs)[mask].abs().max().item()
    # Batched learner forward vs the engine's cached decode: float32 noise at the scale of the
    # tempered logits (tests/float_bounds.py); a wrong token, position or temperature moves >1e-2.
    bound = logit_bound(sharp_nano_model, [t.token_ids for t in trajectories]) / min(temperature, 1.0)
    assert diff < bound, f"learner vs engine log-prob mismatch {diff:.2e} (float-noise bound {bound:.2e})"
    assert batch.old_logprobs[mask].min() < -0.5  # not a trivially deterministic policy
    assert torch.isfinite(entropy[mask]).all()

    # the temperature matters: at another temperature the same tokens get other log-probs
    with torch.no_grad():
        other, _ = token_logprobs(sharp_nano_model, batch.input_ids, batch.attention_mask, temperature * 2)
    assert (other - batch.old_logprobs)[mask].abs().max().item() > 1e-2
