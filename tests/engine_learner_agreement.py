"""Invariant 1 on one engine call: the engine's behaviour log-probs equal the learner's log-probs
recomputed on the same token ids, for every learner forward (padded `transformers`, packed with
torch's kernels, packed with the C kernels).

Used by the tests of the engine on real architectures (tests/engines/test_smollm2_shape.py,
test_architectures.py, and the real model's test in the real_model group).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from float_bounds import forward_bound
from reinforge.engines import torch_engine
from reinforge.engines.base import Generation, SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.learner.logprobs import token_logprobs
from reinforge.learner.packed_forward import native_kernels_usable

# The learner's forwards: (pack, algo.packed_kernels)
LEARNER_FORWARDS = ((False, "torch"), (True, "torch"), (True, "native"))


@dataclass
class EngineCall:
    prompts: list[list[int]]
    generations: list[Generation]
    shared_prompt: bool  # whether the prompt was cached once per group (FusedLlamaDecoder.prefill_shared)


def sample(
    model, prompts: list[list[int]], params: SamplingParams, decode_kernels: str = "auto", shared: bool = True,
    budgets: list[int] | None = None, seed: int = 0, pad: int = 0,
) -> EngineCall:
    """One `generate` call; `shared=False` keeps a group's prompt out of the shared cache (the
    engine's thresholds are set for this call only)."""
    engine = TorchEngine(model, pad, decode_kernels=decode_kernels)
    # shared: a group's prompt of MIN_SHARED_PROMPT+ tokens is cached once with either kernel
    # (the C decode attention's own threshold is higher, for speed); not shared: never
    width = torch_engine.MIN_SHARED_PROMPT if shared else 1 << 30
    saved = torch_engine.MIN_SHARED_PROMPT, torch_engine.MIN_SHARED_PROMPT_NATIVE
    torch_engine.MIN_SHARED_PROMPT = torch_engine.MIN_SHARED_PROMPT_NATIVE = width
    try:
        decoder = engine._get_decoder()
        used = []
        if engine.fused:
            if decode_kernels != "auto":
                assert decoder.native == (decode_kernels == "native")
            original = decoder.prefill_shared
            decoder.prefill_shared = lambda *args: used.append(args[2]) or original(*args)
        generations = engine.generate(prompts, params, seed=seed, budgets=budgets)
    finally:
        torch_engine.MIN_SHARED_PROMPT, torch_engine.MIN_SHARED_PROMPT_NATIVE = saved
    return EngineCall(prompts, generations, bool(used))


def right_padded(sequences: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, sequences))
    ids = torch.full((len(sequences), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence)
        mask[row, : len(sequence)] = 1
    return ids, mask


@torch.no_grad()
def assert_learner_agrees(model, calls: EngineCall | list[EngineCall], temperature: float = 1.0, forwards=LEARNER_FORWARDS) -> float:
    """Every sampled token's behaviour log-prob equals each learner forward's within the float32
    bound (tests/float_bounds.py: forward_bound at the largest |logit| where a sampled token is
    predicted, over the temperature below 1). Several calls are checked in one learner batch.
    Returns the largest gap seen."""
    calls = calls if isinstance(calls, list) else [calls]
    prompts = [p for call in calls for p in call.prompts]
    generations = [g for call in calls for g in call.generations]
    sequences = [p + g.token_ids for p, g in zip(prompts, generations)]
    ids, mask = right_padded(sequences)
    behaviour = torch.zeros(ids.shape[0], ids.shape[1] - 1)
    sampled = torch.zeros_like(behaviour, dtype=torch.bool)
    for row, (prompt, generation) in enumerate(zip(prompts, generations)):
        end = len(prompt) - 1 + len(generation.token_ids)  # position t predicts token t + 1
        behaviour[row, len(prompt) - 1 : end] = torch.tensor(generation.logprobs)
        sampled[row, len(prompt) - 1 : end] = True
    assert sampled.any()
    worst = 0.0
    was_training = model.training
    model.eval()
    try:
        bound = forward_bound(model, logit_scale(model, ids, mask, sampled)) / min(temperature, 1.0)
        for pack, kernels in forwards:
            if kernels == "native":
                assert native_kernels_usable(model, kernels)
            learner, _ = token_logprobs(model, ids, mask, temperature, pack=pack, entropy=False, packed_kernels=kernels)
            gap = (learner - behaviour)[sampled].abs().max().item()
            assert gap < bound, f"learner (pack={pack}, kernels={kernels}) vs engine: {gap:.3g} > float bound {bound:.3g}"
            worst = max(worst, gap)
    finally:
        model.train(was_training)
    return worst


def logit_scale(model, ids: torch.Tensor, mask: torch.Tensor, where: torch.Tensor) -> float:
    """The largest |logit| at the positions `where` [N, T-1] (the LM head on those only: with a
    49k vocabulary, logits everywhere cost more than the rest of a small model's forward)."""
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model  # a LoRA model: its adapted base
    hidden = causal_lm.base_model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1][where]
    return causal_lm.get_output_embeddings()(hidden).abs().max().item()
