"""Rollout pruning: the selection rule (hand-computed), the group minimum, the head's features in
the engine equal the teacher-forced ones it trains on, and the head's state resumes exactly."""

from __future__ import annotations

import random

import pytest
import torch

from reinforge.config import SuccessHeadConfig
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.learner.success_head_learner import SuccessHeadLearner, check_positions, trajectory_features
from reinforge.models.success_head import prefix_features
from reinforge.rollout.trajectory import single_turn_trajectory
from reinforge.values.rollout_pruning import PruningHook, prune_choice, pruning_metrics


def test_prune_choice_by_hand() -> None:
    # known predictions 0.1 0.7 0.3 0.05 (live) and 0.9 (finished): S = 2, F = 3;
    # keep_fail = max(1, ceil(2 * 0.5 / 0.5)) = 2; k = min(3 live failures, 3 - 2, 6 - 2) = 1: the lowest, 0.05.
    assert prune_choice([0.1, 0.7, 0.3, 0.05], [0.9, None], min_group_size=2, target_ratio=0.5, fail_below=0.5) == [3]
    # rho = 0.25 wants 3 failures per success: keep_fail = 6 > F, nothing pruned.
    assert prune_choice([0.1, 0.7, 0.3, 0.05], [0.9, None], 2, 0.25, 0.5) == []
    # all predicted to fail: keep one failure, but the group minimum (2 of 4) binds first: k = min(4, 3, 2) = 2.
    assert prune_choice([0.1, 0.2, 0.3, 0.4], [], 2, 0.5, 0.5) == [0, 1]
    # all predicted to succeed: nothing to prune.
    assert prune_choice([0.6, 0.8], [0.9], 2, 0.5, 0.5) == []


def test_pruning_never_empties_a_group_below_its_minimum_nor_prunes_a_predicted_success() -> None:
    rng = random.Random(0)
    for _ in range(2000):
        size, minimum = rng.randint(2, 12), rng.randint(2, 6)
        n_live = rng.randint(0, size)
        live = [rng.random() for _ in range(n_live)]
        done = [rng.choice([None, rng.random()]) for _ in range(size - n_live)]
        rho, tau = rng.uniform(0.05, 0.95), rng.uniform(0.05, 0.95)
        chosen = prune_choice(live, done, minimum, rho, tau)
        assert len(set(chosen)) == len(chosen) and all(0 <= i < n_live for i in chosen)
        assert not chosen or size - len(chosen) >= minimum
        assert all(live[i] < tau for i in chosen)
        if chosen:  # a group that had a predicted failure keeps one
            assert sum(p < tau for p in [*live, *done] if p is not None) - len(chosen) >= 1


class ParityHead:
    """Stands in for a SuccessHeadLearner: even rows are predicted to fail (0.1), odd rows to succeed (0.9)."""

    def __init__(self, cfg: SuccessHeadConfig):
        self.cfg, self.budget, self.head = cfg, 8, self
        self.rows = torch.zeros(0, dtype=torch.long)

    def probability(self, features: torch.Tensor) -> torch.Tensor:
        assert len(features) == len(self.rows)
        return torch.where(self.rows % 2 == 0, 0.1, 0.9)


class ParityHook(PruningHook):
    def __call__(self, check):
        self.learner.rows = check.rows  # the fake head predicts from the row number
        return super().__call__(check)


@pytest.mark.parametrize("target_ratio, reasons", [
    (0.5, ["length"] * 4),  # two predicted successes per group keep both predicted failures
    (0.75, ["pruned", "length", "length", "length"]),  # ceil(2 * 0.25 / 0.75) = 1 failure kept: of the two tied at 0.1, the first goes
])
def test_pruning_hook_balances_each_group_in_the_engine(sharp_nano_model, tokenizer, target_ratio, reasons) -> None:
    cfg = SuccessHeadConfig(enabled=True, prune=True, check_every=2, min_group_size=2, target_ratio=target_ratio)
    hook = ParityHook(ParityHead(cfg), group_size=4)
    prompts = [tokenizer("12+3=").input_ids] * 4 + [tokenizer("7+8=").input_ids] * 4
    out = TorchEngine(sharp_nano_model, tokenizer.pad_token_id).generate(prompts, SamplingParams(6, 1.0), seed=0, decode_hook=hook)
    assert [g.finish_reason for g in out] == reasons * 2
    assert [len(g.token_ids) for g in out] == [2 if r == "pruned" else 6 for r in reasons * 2]


def test_engine_features_equal_the_teacher_forced_features_the_head_trains_on(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    budget, every = 7, 2
    seen: dict[tuple[int, int], torch.Tensor] = {}

    class Record:
        def __init__(self):
            self.every = every

        def __call__(self, check):
            lp = check.logprobs
            feats = prefix_features(check.logits, lp.sum(1), lp.min(1).values, torch.full((len(check.rows),), check.step), budget, torch.zeros(len(check.rows), dtype=torch.bool))
            for row, f in zip(check.rows.tolist(), feats):
                seen[(row, check.step)] = f
            return torch.zeros(len(check.rows), dtype=torch.bool)

    out = TorchEngine(sharp_nano_model, tokenizer.pad_token_id).generate(arithmetic_prompts, SamplingParams(budget, 1.0), seed=1, decode_hook=Record())
    trajectories = [single_turn_trajectory(f"t{i}", p, g.token_ids, g.logprobs, "") for i, (p, g) in enumerate(zip(arithmetic_prompts, out))]
    features, owners = trajectory_features(sharp_nano_model, trajectories, every, budget)
    assert check_positions(7, 2) == [2, 4, 6, 7]
    rows = 0
    for (owner, s), f in zip([(o, s) for o in range(len(trajectories)) for s in check_positions(7, 2)], features):
        assert owners[rows] == owner
        rows += 1
        if s < 7:
            assert torch.allclose(f, seen[(owner, s)], atol=1e-4), (owner, s)
        else:
            assert f[-1] == 1  # the whole-response row


def test_success_head_learns_a_separable_signal_and_resumes_exactly(tokenizer, nano_model) -> None:
    cfg = SuccessHeadConfig(enabled=True, check_every=2, train_steps=100, lr=0.05, warmup_steps=1)
    prompts = [tokenizer(t).input_ids for t in ("1+2=", "3+4=")]
    ids = {True: tokenizer("3").input_ids[-1:], False: tokenizer("9").input_ids[-1:]}

    def batch(n: int):
        rng = random.Random(n)
        out = []
        for i in range(n):
            good = rng.random() < 0.5
            sampled = ids[good] * 3
            t = single_turn_trajectory(f"t{i}", prompts[i % 2], sampled, [-0.1 if good else -2.0] * 3, "")
            t.reward = 1.0 if good else 0.0
            out.append(t)
        return out

    a = SuccessHeadLearner(cfg, nano_model.config.vocab_size, budget=4, seed=0)
    a.update(nano_model, batch(32))
    b = SuccessHeadLearner(cfg, nano_model.config.vocab_size, budget=4, seed=7)
    b.load_state_dict(a.state_dict())
    assert a.ready and b.ready
    ma, mb = a.update(nano_model, batch(33)), b.update(nano_model, batch(33))
    assert ma == mb
    assert all(torch.equal(x, y) for x, y in zip(a.head.parameters(), b.head.parameters()))
    assert ma["success_head/accuracy"] == 1.0 and ma["success_head/brier"] < 0.1  # scored before training on them
    scores = a.score_responses(nano_model, batch(8))
    assert all((s > 0.5) == (t.reward == 1.0) for s, t in zip(scores, batch(8)))


def test_pruning_metrics_count_the_pruned_and_estimate_what_they_saved() -> None:
    def t(group: int, n: int, reason: str = "stop"):
        traj = single_turn_trajectory("x", [1], [5] * n, [0.0] * n, "", finish_reason=reason, group_id=group)
        return traj

    kept = [t(0, 6), t(0, 4), t(1, 3)]
    pruned = [t(0, 2, "pruned"), t(1, 4, "pruned")]
    m = pruning_metrics(kept, pruned)
    # group 0 survivors average 5 tokens: saved 5 - 2 = 3; group 1's pruned row was longer than its survivor: 0.
    assert m == pytest.approx({
        "prune/rollouts": 2.0, "prune/fraction": 0.4, "prune/tokens_pruned_rows": 6.0, "prune/tokens_saved_est": 3.0, "prune/tokens_sampled": 19.0,
    })
