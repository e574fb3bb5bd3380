"""reward.on_error: a sample whose reward failed leaves the loss (drop, default), with its whole
group for group-relative estimators, or is trained on with the fallback score (fallback)."""

from __future__ import annotations

import copy

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task
from reinforge.trainer.advantage_step import prepare_batch
from reinforge.learner.policy_objective import make_policy_objective
from reinforge.trainer.reward_failures import drop_failed_samples

GROUP = 4
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.0, 1.0, 0.2]
FAILED = 5  # in group 1


@pytest.fixture(scope="module")
def rollouts(tokenizer, nano_model):
    engine = TorchEngine(nano_model, tokenizer.pad_token_id)
    tasks = [Task(id=f"t{i}", prompt=text, answer="0") for i, text in enumerate(["1+2=", "35+7=", "9="])]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))
    return rollout_groups(engine, SingleTurnEnv(tokenizer, "raw"), tasks, GROUP, params, seed=5)


def scored(rollouts, failed_reward: float, fail: bool = True):
    out = copy.deepcopy(rollouts)
    for i, (t, r) in enumerate(zip(out, REWARDS)):
        t.reward, t.rewards = r, {"correct": r}
    if fail:
        out[FAILED].reward = out[FAILED].rewards["correct"] = failed_reward
        out[FAILED].reward_failures = {"correct": "timeout"}
    return out


def test_drop_takes_the_sample_or_its_group_and_counts_it(rollouts) -> None:
    batch = scored(rollouts, 0.0)
    kept, metrics = drop_failed_samples(batch, "drop", group_relative=True)
    assert [t.group_id for t in kept] == [0] * 4 + [2] * 4 and metrics == {"reward_dropped": 4.0}
    kept, metrics = drop_failed_samples(batch, "drop", group_relative=False)
    assert kept == batch[:FAILED] + batch[FAILED + 1 :] and metrics == {"reward_dropped": 1.0}
    kept, metrics = drop_failed_samples(batch, "fallback", group_relative=True)
    assert kept == batch and metrics == {"reward_dropped": 0.0}
    with pytest.raises(ValueError, match="reward.on_error"):
        drop_failed_samples(batch, "ignore", group_relative=True)


def updated_weights(model, tokenizer, trajectories, on_error: str) -> dict[str, torch.Tensor]:
    algo = load_config("default", []).algo
    estimator = get_estimator(algo.advantage)
    learner = PolicyLearner(copy.deepcopy(model), lr=1e-2)
    trained, _ = drop_failed_samples(trajectories, on_error, estimator.min_group_size > 1)
    batch, _ = prepare_batch(trained, algo, estimator, {"correct": 1.0}, tokenizer.pad_token_id, learner, None, None)
    learner.train_step(batch, make_policy_objective(algo))
    return {k: v.clone() for k, v in learner.model.state_dict().items()}


def test_a_dropped_sample_contributes_nothing_to_the_update(rollouts, tokenizer, nano_model) -> None:
    # Whatever the failed sample's (made-up) score, the update is the same: it is not in the loss,
    # and neither is its group (grpo, the default, is group-relative) ...
    low = updated_weights(nano_model, tokenizer, scored(rollouts, 0.0), "drop")
    high = updated_weights(nano_model, tokenizer, scored(rollouts, 1.0), "drop")
    without_group = updated_weights(nano_model, tokenizer, [t for t in scored(rollouts, 0.0) if t.group_id != 1], "drop")
    assert all(torch.equal(low[k], high[k]) and torch.equal(low[k], without_group[k]) for k in low)
    # ... while with on_error=fallback the made-up score is trained on and moves the weights.
    low_fb = updated_weights(nano_model, tokenizer, scored(rollouts, 0.0), "fallback")
    high_fb = updated_weights(nano_model, tokenizer, scored(rollouts, 1.0), "fallback")
    assert any(not torch.equal(low_fb[k], high_fb[k]) for k in low_fb)
