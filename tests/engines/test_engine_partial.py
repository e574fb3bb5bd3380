"""TorchEngine for partial rollouts: per-row token budgets, stopping mid-batch, resuming a row."""

from __future__ import annotations

import pytest
import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from float_bounds import logit_bound

STEPS = 8
GREEDY = SamplingParams(max_new_tokens=STEPS, temperature=0.0)


def test_budgets_cut_each_row_at_its_own_length(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    full = engine.generate(arithmetic_prompts, GREEDY)
    budgets = [1, 3, 8, 5, 2]
    out = engine.generate(arithmetic_prompts, GREEDY, budgets=budgets)
    for g, f, budget in zip(out, full, budgets):
        assert g.token_ids == f.token_ids[:budget]
        assert g.finish_reason == "length"
        assert g.logprobs == pytest.approx(f.logprobs[:budget], abs=logit_bound(sharp_nano_model, arithmetic_prompts))


def test_stop_when_aborts_the_unfinished_rows_and_a_resumed_row_continues_where_it_stopped(
    sharp_nano_model, arithmetic_prompts, tokenizer
) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    engine.sync_weights(4)
    full = engine.generate(arithmetic_prompts, GREEDY)
    budgets = [2, STEPS, STEPS, STEPS, STEPS]  # row 0 finishes after 2 tokens: then stop everything
    calls = []

    def stop_when(finished: torch.Tensor) -> bool:
        calls.append(finished.tolist())
        return True

    out = engine.generate(arithmetic_prompts, GREEDY, budgets=budgets, stop_when=stop_when)
    assert calls == [[True, False, False, False, False]]
    assert (out[0].token_ids, out[0].finish_reason) == (full[0].token_ids[:2], "length")
    for g, f in zip(out[1:], full[1:]):
        assert (g.token_ids, g.finish_reason, g.policy_version) == (f.token_ids[:2], "aborted", 4)

    # Resumed as prompt + sampled tokens with the rest of the budget, by newer weights (same here):
    # the row goes on exactly as if it had never stopped.
    engine.sync_weights(5)
    prompts = [p + g.token_ids for p, g in zip(arithmetic_prompts[1:], out[1:])]
    rest = engine.generate(prompts, GREEDY, budgets=[STEPS - 2] * len(prompts))
    for first, second, f in zip(out[1:], rest, full[1:]):
        assert first.token_ids + second.token_ids == f.token_ids
        assert first.logprobs + second.logprobs == pytest.approx(f.logprobs, abs=logit_bound(sharp_nano_model, arithmetic_prompts))
        assert second.policy_version == 5


def test_stop_when_false_changes_nothing(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    params = SamplingParams(max_new_tokens=STEPS, temperature=1.0)
    free = engine.generate(arithmetic_prompts, params, seed=3)
    out = engine.generate(arithmetic_prompts, params, seed=3, budgets=[STEPS] * 5, stop_when=lambda finished: False)
    assert [(g.token_ids, g.logprobs, g.finish_reason) for g in out] == [(g.token_ids, g.logprobs, g.finish_reason) for g in free]


def test_bad_budgets_are_refused(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="budget"):
        engine.generate(arithmetic_prompts, GREEDY, budgets=[0, 1, 1, 1, 1])
    with pytest.raises(ValueError, match="one batch"):
        TorchEngine(sharp_nano_model, tokenizer.pad_token_id, max_batch_size=2).generate(
            arithmetic_prompts, GREEDY, stop_when=lambda finished: True
        )
