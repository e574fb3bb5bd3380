"""TorchEngine's lane (Engine.lane, the async producer's engine): a model of its own that takes named
weights under a version, while the engine keeps sampling the learner's live model."""

from __future__ import annotations

import copy

import pytest
import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine

PARAMS = SamplingParams(max_new_tokens=8, temperature=1.0)


def samples(engine, prompts):
    return [(g.token_ids, g.logprobs, g.policy_version) for g in engine.generate(prompts, PARAMS, seed=3)]


def test_a_lane_samples_its_own_weights_and_never_touches_the_learners(sharp_nano_model, tokenizer, arithmetic_prompts) -> None:
    learner = copy.deepcopy(sharp_nano_model)
    engine = TorchEngine(learner, tokenizer.pad_token_id)
    engine.sync_weights(2)
    lane = engine.lane()
    assert lane.model is not learner and samples(lane, arithmetic_prompts) == samples(engine, arithmetic_prompts)

    older = {k: v.clone() for k, v in learner.state_dict().items()}
    with torch.no_grad():
        learner.lm_head.weight.mul_(1.5)  # the learner's update
    engine.stage_weights(3)
    lane.load_weights(older, 2)
    moved = {k: v.clone() for k, v in learner.state_dict().items()}

    reference = TorchEngine(copy.deepcopy(sharp_nano_model), tokenizer.pad_token_id)
    reference.sync_weights(2)
    assert samples(lane, arithmetic_prompts) == samples(reference, arithmetic_prompts)
    assert samples(engine, arithmetic_prompts) != samples(lane, arithmetic_prompts)
    assert {v for _, _, v in samples(engine, arithmetic_prompts)} == {3}
    assert all(torch.equal(v, moved[k]) for k, v in learner.state_dict().items())  # loading into the lane left the learner alone


def test_the_loops_engine_refuses_other_weights(sharp_nano_model, tokenizer) -> None:
    engine = TorchEngine(copy.deepcopy(sharp_nano_model), tokenizer.pad_token_id)
    with pytest.raises(TypeError, match="lane"):
        engine.load_weights(engine.model.state_dict(), 1)
