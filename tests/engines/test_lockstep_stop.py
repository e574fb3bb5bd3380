"""The lock-step replay of a partial-rollout stop rule (reinforge.engines.lockstep_stop): an engine
whose rows advance out of step (vLLM) cuts the same rows at the same token as TorchEngine, which
samples in lock-step, whatever the order in which the tokens arrive."""

from __future__ import annotations

import random

import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.lockstep_stop import LockstepStop
from reinforge.engines.torch_engine import TorchEngine
from reinforge.rollout.partial import GroupQuota

STOPS = (257, 258, 31)  # frequent for the sharpened nano model: rows end at different lengths


def quota(rows_per_group: int, groups: int, need: int, must: list[bool]) -> GroupQuota:
    return GroupQuota(
        group_of_row=torch.arange(groups).repeat_interleave(rows_per_group), done_before=torch.zeros(groups, dtype=torch.long),
        sizes=torch.full((groups,), rows_per_group), must=torch.tensor(must), need=need,
    )


def replay(full, rule, rng: random.Random) -> list[tuple[list[int], str]]:
    """Deliver each row's tokens out of step, a random number per engine step, as vLLM may; stop
    delivering once the rule fires; then cut as the vLLM worker does."""
    stop = LockstepStop(rule, len(full))
    held = [0] * len(full)
    while not all(n == len(g.token_ids) for n, g in zip(held, full)):
        for row, g in enumerate(full):
            held[row] = min(len(g.token_ids), held[row] + rng.randint(0, 3))
        finished = [n == len(g.token_ids) for n, g in zip(held, full)]
        if stop.update(held, finished) is not None:
            break
    finished = [n == len(g.token_ids) for n, g in zip(held, full)]
    out = []
    for n, done, g in zip(held, finished, full):
        keep, aborted = stop.cut(n, done)
        out.append((g.token_ids[:keep], "aborted" if aborted else g.finish_reason))
    return out


def test_out_of_step_rows_are_cut_where_torch_engine_cuts_them(sharp_nano_model, tokenizer, arithmetic_prompts) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    params = SamplingParams(max_new_tokens=24, temperature=1.0, stop_token_ids=STOPS)
    prompts = [p for p in arithmetic_prompts for _ in range(4)]  # 5 groups of 4
    budgets = [24 - (i % 3) * 5 for i in range(len(prompts))]
    for need, must in ((2, [False, False, False, True, False]), (1, [False] * 5), (3, [False, False, False, False, True])):
        lockstep = engine.generate(prompts, params, seed=7, budgets=budgets, stop_when=quota(4, 5, need, must))
        full = engine.generate(prompts, params, seed=7, budgets=budgets)  # the same draws, never stopped
        assert any(g.finish_reason == "aborted" for g in lockstep), "no row was cut: the case does not exercise the stop"
        expected = [(g.token_ids, g.finish_reason) for g in lockstep]
        for order_seed in range(5):
            assert replay(full, quota(4, 5, need, must), random.Random(order_seed)) == expected


def test_a_rule_that_never_fires_cuts_nothing() -> None:
    stop = LockstepStop(lambda finished: False, 3)
    assert stop.update([2, 5, 1], [True, False, False]) is None
    assert stop.update([2, 5, 4], [True, True, True]) is None
    assert [stop.cut(n, True) for n in (2, 5, 4)] == [(2, False), (5, False), (4, False)]


def test_the_rule_is_asked_only_at_steps_every_row_has_passed() -> None:
    asked = []

    def rule(finished: torch.Tensor) -> bool:
        asked.append(finished.tolist())
        return True

    stop = LockstepStop(rule, 3)
    # row 0 finished at 2 tokens, but row 2 holds only 1: step 2 is not known for every row yet
    assert stop.update([2, 6, 1], [True, False, False]) is None and asked == []
    assert stop.update([2, 7, 3], [True, False, False]) == 2
    assert asked == [[True, False, False]]
    assert [stop.cut(n, done) for n, done in ((2, True), (7, False), (3, False))] == [(2, False), (2, True), (2, True)]
