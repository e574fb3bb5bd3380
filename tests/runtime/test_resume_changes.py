"""`--resume --force KEY=VALUE`: the config wins over the optimizer and scorer state a checkpoint restores."""

from __future__ import annotations

import copy

import pytest
import torch

from reinforge.config import RewardComponent
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.rollout.trajectory import single_turn_trajectory
from reinforge.tasks.task import Task
from reinforge.runtime.resume_changes import load_optimizer_state, reward_spec, scorer_state_for


def trained_optimizer(lr: float, weight_decay: float) -> tuple[torch.nn.Linear, torch.optim.AdamW]:
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(3):
        optimizer.zero_grad()
        layer(torch.randn(4, 3)).square().sum().backward()
        optimizer.step()
    return layer, optimizer


def test_restored_optimizer_takes_the_configured_lr_and_weight_decay() -> None:
    layer, saved = trained_optimizer(lr=1e-4, weight_decay=0.0)
    state = copy.deepcopy(saved.state_dict())
    resumed = torch.optim.AdamW(layer.parameters(), lr=0.05, weight_decay=0.1)  # built from the changed config
    load_optimizer_state(resumed, state)
    assert resumed.param_groups[0]["lr"] == 0.05 and resumed.param_groups[0]["weight_decay"] == 0.1
    # The moments and step counts are the checkpoint's.
    for p in layer.parameters():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(resumed.state[p][key], saved.state[p][key])
    # torch's own load_state_dict would have brought the old rate back: what this guards against.
    plain = torch.optim.AdamW(layer.parameters(), lr=0.05, weight_decay=0.1)
    plain.load_state_dict(state)
    assert plain.param_groups[0]["lr"] == 1e-4


def test_the_next_step_uses_the_new_rate() -> None:
    """One AdamW step from the restored moments, by hand: p <- p - lr * m_hat / (sqrt(v_hat) + eps)."""
    layer, saved = trained_optimizer(lr=1e-4, weight_decay=0.0)
    resumed = torch.optim.AdamW(layer.parameters(), lr=0.05, weight_decay=0.0)
    load_optimizer_state(resumed, copy.deepcopy(saved.state_dict()))
    weight = layer.weight
    before = weight.detach().clone()
    resumed.zero_grad()
    layer(torch.ones(1, 3)).sum().backward()
    grad = weight.grad.clone()
    m, v, step = (resumed.state[weight][k].clone() for k in ("exp_avg", "exp_avg_sq", "step"))
    resumed.step()
    beta1, beta2, eps, t = 0.9, 0.999, 1e-8, step.item() + 1
    m, v = beta1 * m + (1 - beta1) * grad, beta2 * v + (1 - beta2) * grad * grad
    expected = before - 0.05 * (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps)
    torch.testing.assert_close(weight.detach(), expected)


def test_an_unchanged_resume_restores_the_param_groups_exactly() -> None:
    layer, saved = trained_optimizer(lr=3e-4, weight_decay=0.01)
    resumed = torch.optim.AdamW(layer.parameters(), lr=3e-4, weight_decay=0.01)
    load_optimizer_state(resumed, copy.deepcopy(saved.state_dict()))
    assert resumed.state_dict()["param_groups"] == saved.state_dict()["param_groups"]


class Counting:
    deterministic = True

    def __init__(self, scale: float):
        self.scale, self.calls = scale, 0

    def __call__(self, task, trajectory) -> float:
        self.calls += 1
        return self.scale * len(trajectory.response_text)


TASKS = {"t0": Task(id="t0", prompt="2+3=", answer="5")}


def score_once(scorer: RewardScorer) -> float:
    trajectory = single_turn_trajectory("t0", [1, 2], [10, 11, 12], [-0.5] * 3, "123", "stop")
    scorer.score(TASKS, [trajectory])
    return trajectory.reward


@pytest.mark.parametrize("changed", [False, True])
def test_reward_cache_of_a_changed_component_is_dropped(changed: bool) -> None:
    old = [RewardComponent(name="len", fn="length", params={"scale": 1}), RewardComponent(name="other", fn="length")]
    new = [RewardComponent(name="len", fn="length", params={"scale": 2 if changed else 1}), old[1]]
    first_fn, kept_fn = Counting(1.0), Counting(1.0)
    # Threads: the counters are read in this process (with worker processes they count elsewhere).
    first = RewardScorer([NamedReward("len", first_fn, 1.0), NamedReward("other", kept_fn, 1.0)], cache=True, isolation="thread")
    assert score_once(first) == 6.0
    saved = first.state_dict()
    first.close()

    second_fn, kept_again = Counting(2.0 if changed else 1.0), Counting(1.0)
    resumed = RewardScorer([NamedReward("len", second_fn, 1.0), NamedReward("other", kept_again, 1.0)], cache=True, isolation="thread")
    resumed.load_state_dict(scorer_state_for(saved, reward_spec(old), reward_spec(new)))
    try:
        # Changed: the new function scores (2 x 3 characters) instead of the cache's old 3.0.
        assert score_once(resumed) == (9.0 if changed else 6.0)
        assert second_fn.calls == (1 if changed else 0)
        assert kept_again.calls == 0  # an unchanged component keeps its cached scores
    finally:
        resumed.close()


def test_checkpoints_without_a_reward_spec_keep_their_scorer_state() -> None:
    state = {"cache": [(("t0", "1", "stop", 1, "len"), 1.0)], "components": {"len": {"n": 3}}}
    assert scorer_state_for(state, None, {"len": {"fn": "other", "params": {}}}) is state
