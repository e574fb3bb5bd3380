"""Rollout pruning on any engine (reinforge.rollout.pruned_sampling): the chunked checks decide
exactly what the decode hook decides on the same logits (by hand), read the same logits the engine
had at the check, fall at the same prefix lengths, count pruned rows towards a partial round's quota,
and keep a group's accounting across the turns of a multi-turn episode."""

from __future__ import annotations

import math

import torch

from reinforge.config import SuccessHeadConfig
from reinforge.engines.base import SamplingParams
from reinforge.engines.decode_hook import DecodeCheck
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.base import StepResult
from reinforge.learner.success_head_learner import SuccessHeadLearner
from reinforge.models.prefix_logits import prefix_logits
from reinforge.rollout.episodes import rollout_groups
from reinforge.rollout.partial import GroupQuota
from reinforge.rollout.pruned_sampling import PrefixCheck, generate_pruned
from reinforge.tasks.task import Task
from reinforge.values import rollout_pruning
from reinforge.values.rollout_pruning import PruningHook

PARAMS = SamplingParams(max_new_tokens=7, temperature=1.0)  # no stop token: rows run to their budget unless stopped


def head_on_mean_logprob(vocab: int) -> SuccessHeadLearner:
    """A success head with p = sigmoid(2 + 2 * mean sampled log-prob): every other feature weighs 0."""
    cfg = SuccessHeadConfig(enabled=True, prune=True, check_every=2, min_group_size=2, target_ratio=0.75)
    learner = SuccessHeadLearner(cfg, vocab, budget=8, seed=0)
    with torch.no_grad():
        learner.head.net.weight.zero_()
        learner.head.net.bias.fill_(2.0)
        learner.head.net.weight[0, vocab + 2] = 2.0  # features: log-probs [V], entropy, max prob, mean log-prob, ...
    return learner


def test_chunked_checks_decide_what_the_decode_hook_decides_on_the_same_logits(monkeypatch) -> None:
    vocab = 16
    learner = head_on_mean_logprob(vocab)
    means = [-0.1, -3.0, -2.0, -0.5, -3.0, -2.0]  # live rows 0-3 (group 0) and 4-5 (group 1); rows 6-7 finished unchecked
    p = [1 / (1 + math.exp(-(2 + 2 * m))) for m in means]  # 0.86 0.018 0.12 0.73 0.018 0.12
    assert [x >= 0.5 for x in p] == [True, False, False, True, False, False]
    # group 0: S = 2, F = 2; rho = 0.75 keeps max(1, ceil(2 * 0.25 / 0.75)) = 1 failure: k = min(2, 2 - 1, 4 - 2) = 1,
    #   the lowest (row 1). group 1: S = 0, F = 2 (rows 6-7 have no prediction): keep 1, k = min(2, 1, 4 - 2) = 1: row 4.
    expected = [False, True, False, False, True, False]
    logits = torch.randn(6, vocab, generator=torch.Generator().manual_seed(0))
    logprobs = torch.tensor([[m, m] for m in means])

    hook = PruningHook(learner, group_size=4)
    check = DecodeCheck(2, torch.arange(6), logits, logprobs, torch.tensor([False] * 6 + [True, True]), torch.zeros(8, dtype=torch.bool))
    assert hook(check).tolist() == expected

    monkeypatch.setattr(rollout_pruning, "prefix_logits", lambda model, contexts: logits)  # "the same logits"
    chunked = PruningHook(learner, group_size=4, model=object())
    members = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    prefix = PrefixCheck(members, [[1, 2, 3]] * 6, logprobs.tolist(), {0: [], 1: [(1, 2), (1, 3)]})
    assert chunked.check_prefixes(prefix) == expected


def test_the_logits_read_at_a_prefix_are_the_engines_at_that_step(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    seen = []

    class Record:
        every = 3

        def __call__(self, check):
            seen.append(check)
            return torch.zeros(len(check.rows), dtype=torch.bool)

    out = TorchEngine(sharp_nano_model, tokenizer.pad_token_id).generate(arithmetic_prompts, PARAMS, seed=1, decode_hook=Record())
    for check in seen:
        contexts = [arithmetic_prompts[r] + out[r].token_ids[: check.step] for r in check.rows.tolist()]
        assert torch.allclose(prefix_logits(sharp_nano_model, contexts), check.logits.float(), atol=1e-4)


class StopAt:
    """A pruner that stops `member` once its turn holds `length` tokens, and records every check."""

    every = 2

    def __init__(self, stops: dict):
        self.stops, self.checks = stops, []

    def check_prefixes(self, check: PrefixCheck) -> list[bool]:
        self.checks.append(check)
        return [self.stops.get(m) == len(lp) for m, lp in zip(check.members, check.logprobs)]


def test_chunks_end_at_multiples_of_every_and_a_stopped_row_keeps_its_tokens(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    members = [(0, i) for i in range(len(arithmetic_prompts))]
    pruner = StopAt({(0, 1): 4})
    # Row 0 resumes a turn that sampled 3 tokens already, with 4 left: its checks fall at 4 and 6 tokens, like the others'.
    budgets, prior = [4] + [7] * 4, [[-0.5] * 3] + [[] for _ in range(4)]
    out = generate_pruned(engine, arithmetic_prompts, PARAMS, 3, pruner, members, {}, budgets, prior)
    lengths = {m: [len(lp) for c in pruner.checks for mm, lp in zip(c.members, c.logprobs) if mm == m] for m in members}
    assert lengths == {(0, 0): [4, 6], (0, 1): [2, 4], (0, 2): [2, 4, 6], (0, 3): [2, 4, 6], (0, 4): [2, 4, 6]}
    assert [g.finish_reason for g in out] == ["length", "pruned", "length", "length", "length"]
    assert [len(g.token_ids) for g in out] == [4, 4, 7, 7, 7]
    for check in pruner.checks:  # the context is the prompt and what the row sampled so far; the log-probs are the turn's
        for (_, i), context, lp in zip(check.members, check.contexts, check.logprobs):
            sampled = len(lp) - len(prior[i])
            assert context == arithmetic_prompts[i] + out[i].token_ids[:sampled] and lp[len(prior[i]):] == out[i].logprobs[:sampled]


def test_pruned_rows_count_towards_a_partial_rounds_quota(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    prompts = arithmetic_prompts[:4]
    members = [(0, 0), (0, 1), (1, 0), (1, 1)]
    quota = GroupQuota(torch.tensor([0, 0, 1, 1]), torch.zeros(2, dtype=torch.long), torch.full((2,), 2), torch.zeros(2, dtype=torch.bool), 1)
    out = generate_pruned(engine, prompts, PARAMS, 3, StopAt({(0, 0): 2, (0, 1): 2}), members, {}, stop_when=quota)
    # Group 0 is complete once both its rows are pruned at the first check: the round stops there.
    assert [g.finish_reason for g in out] == ["pruned", "pruned", "aborted", "aborted"]
    assert [len(g.token_ids) for g in out] == [2, 2, 2, 2]


class TwoTurnEnv:
    """Episode k of a group: the third ends after its first turn, the others after their second."""

    max_turns = 2
    stop_token_ids = ()

    def __init__(self):
        self.made, self.steps = 0, []

    def episode(self):
        env, index = self, self.made
        self.made += 1

        class Episode:
            turns = 0

            def reset(self, task):
                return [1, 5, 6]

            def step(self, text, finish_reason):
                env.steps.append((index, self.turns))
                self.turns += 1
                return StepResult(observation_ids=[7, 8], done=index == 2 or self.turns == 2)

        return Episode()

    def decode_response(self, token_ids):
        return ""


def test_a_multi_turn_group_is_accounted_across_turns_and_a_pruned_turn_ends_its_episode(sharp_nano_model, tokenizer) -> None:
    env, pruner = TwoTurnEnv(), StopAt({})
    original = pruner.check_prefixes

    def second_turn_prunes_the_first_episode(check):  # at the first check of turn 2 (contexts hold the observation)
        stop = original(check)
        return [s or (m == (0, 0) and 7 in c) for s, m, c in zip(stop, check.members, check.contexts)]

    pruner.check_prefixes = second_turn_prunes_the_first_episode
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    trajectories = rollout_groups(engine, env, [Task(id="t", prompt="", answer="")], 3, PARAMS, seed=0, decode_hook=pruner)
    second_turn = [c for c in pruner.checks if all(7 in ctx for ctx in c.contexts)]
    assert second_turn and second_turn[0].members == [(0, 0), (0, 1)]
    assert second_turn[0].settled == {0: [(0, 2)]}  # episode 2 ended unpruned in turn 1
    assert [t.finish_reason for t in trajectories] == ["pruned", "stop", "stop"]
    assert [len(t.turn_spans) for t in trajectories] == [2, 2, 1] and trajectories[0].turn_spans[1][1] - trajectories[0].turn_spans[1][0] == 2
    assert sorted(env.steps) == [(0, 0), (1, 0), (1, 1), (2, 0)]  # the pruned turn never reached the env
