"""Invariant 1 on a randomly initialised model of SmolLM2-135M's exact shape (issue 32): hidden
576, 9 query heads over 3 key/value heads (grouped-query attention, 3 query heads per kv head),
head_dim 64, vocabulary 49,152, tied embeddings, rope theta 1e5; 2 of its 30 layers, which keeps
each test to a second or two. Also with 9 kv heads (one query head per kv head).

The engine crashed on this shape (`view size is not compatible` in shared_prompt_attention) when
a batch was one group of several rows with a prompt of 32+ tokens. Here every fast path samples
(prefill, shared-prompt prefill and decode, decode through torch or the C kernels, rows dropped
as their budgets run out) and every learner forward recomputes the log-probs (padded, packed with
torch's or the C kernels).
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from conftest import sharpen_
from engine_learner_agreement import assert_learner_agrees, sample
from reinforge.engines.base import SamplingParams

SMOLLM2_SHAPE = dict(
    vocab_size=49152, hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
    tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, max_position_embeddings=8192,
    rms_norm_eps=1e-5, num_hidden_layers=2,
)


def smollm2_shaped(kv_heads: int = 3) -> LlamaForCausalLM:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{**SMOLLM2_SHAPE, "num_key_value_heads": kv_heads}))
    # Weights of std 0.2 instead of 0.02: peaked next-token distributions (|logits| up to ~25,
    # sampled tokens' log-probs -8 .. -0.1), so a wrong head map, mask or position moves log-probs
    # by far more than the float bound; at 0.02 every log-prob is ~log(1 / 49152).
    return sharpen_(model, std=0.2).eval()


@pytest.fixture(scope="module", params=[3, 9], ids=["gqa-9q-3kv", "9q-9kv"])
def model(request):
    return smollm2_shaped(request.param)


def random_prompt(length: int, seed: int) -> list[int]:
    return torch.randint(3, SMOLLM2_SHAPE["vocab_size"], (length,), generator=torch.Generator().manual_seed(seed)).tolist()


BATCHES = {
    # the batch that crashed: one group of several rows, a 40-token prompt
    "one group, 40-token prompt": ([random_prompt(40, 0)] * 4, [3, 2, 10, 10]),
    # two groups of different prompt lengths (left pads in the shared prompt)
    "two groups, 33 and 37 tokens": ([random_prompt(33, 1)] * 3 + [random_prompt(37, 2)] * 3, [10, 2, 2, 10, 1, 10]),
}


@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("shared", [True, False], ids=["shared-prompt", "per-row-prompt"])
def test_behaviour_logprobs_equal_the_learners(model, batch, shared) -> None:
    """Decode through torch's ops and through the C kernels; every learner forward on both."""
    prompts, budgets = BATCHES[batch]
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    calls = []
    for decode_kernels in ("torch", "native"):
        # Budgets end some rows early: the decode batch thins and is compacted (DecodeState.keep,
        # which gives a shared prompt back to each kept row).
        call = sample(model, prompts, params, decode_kernels, shared, budgets=budgets)
        assert call.shared_prompt == shared
        assert [len(g.token_ids) for g in call.generations] == budgets
        calls.append(call)
    logprobs = [x for g in calls[0].generations for x in g.logprobs]
    assert min(logprobs) < -1.0  # the model is not near-deterministic: a wrong token's log-prob shows
    assert_learner_agrees(model, calls)


def test_one_row_and_short_prompts(model) -> None:
    """The paths a group does not take: a single row, and prompts below the shared-prompt width
    (prefill with pads computed, no copies)."""
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    for prompts in ([random_prompt(5, 3)], [random_prompt(5, 3), random_prompt(9, 4), random_prompt(2, 5)]):
        call = sample(model, prompts, params, "native")
        assert not call.shared_prompt
        assert_learner_agrees(model, call)
