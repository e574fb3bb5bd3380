"""algo.lr_warmup_steps: the policy learner's learning rate rises linearly over its first optimizer
steps (reinforge.learner.policy_learner.warmup_lr); Adam's first step would otherwise move every
weight by the full lr whatever its gradient."""

from __future__ import annotations

import copy

import pytest

from reinforge.learner.policy_learner import PolicyLearner, warmup_lr
from reinforge.models.tiny_llama import build_tiny_llama

from test_policy_learner import hand_made_batch, ppo_loss


def test_warmup_lr_by_hand() -> None:
    assert warmup_lr(1e-3, 0, 4) == pytest.approx(2.5e-4)  # step 1 of 4: a quarter
    assert warmup_lr(1e-3, 1, 4) == pytest.approx(5e-4)
    assert warmup_lr(1e-3, 3, 4) == pytest.approx(1e-3)
    assert warmup_lr(1e-3, 10, 4) == pytest.approx(1e-3)  # and then the full lr
    assert warmup_lr(1e-3, 0, 0) == 1e-3  # no warm-up


def first_step_move(tokenizer, batch, warmup: int) -> float:
    """The largest move of any weight in the learner's first optimizer step."""
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    before = copy.deepcopy(model.state_dict())
    PolicyLearner(model, lr=1e-3, lr_warmup_steps=warmup).train_step(batch, ppo_loss)
    return max((model.state_dict()[k] - before[k]).abs().max().item() for k in before)


def test_first_adam_step_moves_weights_by_the_warmed_up_lr(tokenizer) -> None:
    """Adam's first step is lr * g / (|g| + eps): about lr for every weight with a gradient. With 4
    warm-up steps it is a quarter of that."""
    assert first_step_move(tokenizer, hand_made_batch(), 0) == pytest.approx(1e-3, rel=1e-3)
    assert first_step_move(tokenizer, hand_made_batch(), 4) == pytest.approx(2.5e-4, rel=1e-3)


def test_the_schedule_follows_the_learner_version(tokenizer) -> None:
    """A resumed learner (version restored) takes up the schedule where it was: its lr is the
    one of its step, not the first step's."""
    model = build_tiny_llama(tokenizer, "nano", seed=0)
    learner = PolicyLearner(model, lr=1e-3, lr_warmup_steps=4)
    learner.version = 2
    learner.train_step(hand_made_batch(), ppo_loss)
    assert learner.optimizer.param_groups[0]["lr"] == pytest.approx(7.5e-4)
