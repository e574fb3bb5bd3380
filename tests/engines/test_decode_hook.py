"""The engine's decode hook: called every N decode steps with what the engine knows; the rows it
stops come back "pruned" with the tokens sampled so far, and the other rows are unchanged."""

from __future__ import annotations

import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.decode_hook import DecodeCheck
from reinforge.engines.torch_engine import TorchEngine

PARAMS = SamplingParams(max_new_tokens=7, temperature=1.0)  # no stop token: every row runs 7 steps unless stopped


class StopRowAt:
    def __init__(self, every: int, row: int, at_step: int):
        self.every, self.row, self.at_step = every, row, at_step
        self.checks: list[DecodeCheck] = []

    def __call__(self, check: DecodeCheck) -> torch.Tensor:
        self.checks.append(check)
        return (check.rows == self.row) & (check.step == self.at_step)


def test_hook_sees_every_nth_step_and_stops_its_row(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    plain = engine.generate(arithmetic_prompts, PARAMS, seed=3)
    hook = StopRowAt(every=2, row=1, at_step=4)
    hooked = engine.generate(arithmetic_prompts, PARAMS, seed=3, decode_hook=hook)

    assert [c.step for c in hook.checks] == [2, 4, 6]
    first = hook.checks[0]
    assert first.rows.tolist() == list(range(len(arithmetic_prompts)))
    assert first.logits.shape == (len(arithmetic_prompts), sharp_nano_model.config.vocab_size)
    # The check carries the log-probs of the tokens sampled so far, as the generations report them.
    assert torch.allclose(first.logprobs, torch.tensor([g.logprobs[:2] for g in plain]))
    assert hook.checks[-1].rows.tolist() == [0, 2, 3, 4]  # row 1 is gone after step 4
    assert hook.checks[-1].pruned.tolist() == [False, True, False, False, False]

    assert hooked[1].finish_reason == "pruned"
    assert hooked[1].token_ids == plain[1].token_ids[:4] and hooked[1].logprobs == plain[1].logprobs[:4]
    for i in (0, 2, 3, 4):  # the others sampled exactly what they sample without the hook
        assert hooked[i].token_ids == plain[i].token_ids and hooked[i].finish_reason == "length"


def test_a_hook_that_stops_nothing_changes_nothing(sharp_nano_model, arithmetic_prompts, tokenizer) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    plain = engine.generate(arithmetic_prompts, PARAMS, seed=5)
    hook = StopRowAt(every=3, row=-1, at_step=-1)
    hooked = engine.generate(arithmetic_prompts, PARAMS, seed=5, decode_hook=hook)
    assert [c.step for c in hook.checks] == [3, 6]
    assert [(g.token_ids, g.logprobs, g.finish_reason) for g in hooked] == [(g.token_ids, g.logprobs, g.finish_reason) for g in plain]
