"""Invariant 1 through the gateway: a 3-call agent episode driven by the real `openai` client is
recorded token for token, and the learner's log-probs on it equal the engine's behaviour log-probs."""

from __future__ import annotations

import torch

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.chat_format import ChatFormat
from reinforge.gateway import Gateway
from reinforge.learner.logprobs import token_logprobs
from float_bounds import logit_bound


def test_three_calls_with_a_tool_turn_are_one_exact_part(tokenizer, sharp_nano_model, client_for) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    chat = ChatFormat(tokenizer)
    run = SamplingParams(max_new_tokens=6, temperature=1.0, stop_token_ids=(chat.end_of_turn_id,))
    with Gateway(engine, tokenizer, max_new_tokens=8) as gateway:
        session = gateway.open_session("e0", sampling=run, seed=3, max_calls=3)
        client = client_for(session.base_url, gateway.api_key)
        messages = [{"role": "user", "content": "12*34="}]
        replies, observations = [], []
        for turn, follow_up in enumerate([{"role": "tool", "content": "408"}, {"role": "user", "content": "sure?"}, None]):
            # temperature=0 is asked for and overridden: a training session samples with the run's params.
            reply = client.chat.completions.create(model="policy", messages=messages, temperature=0.0, logprobs=True)
            replies.append(reply)
            if follow_up is None:
                break
            messages += [reply.choices[0].message.model_dump(exclude_none=True), follow_up]
            observations.append([follow_up])
        session.finish()
        (part,) = session.parts()
        stats = gateway.stats()

    assert session.calls == 3 and session.splits == 0 and session.overridden_params == 3 and not session.errors
    assert stats["engine_calls"] == 3 and stats["errors"] == 0

    # token_ids = prompt + sampled + observation + sampled + observation + sampled, exactly.
    expected, sampled = chat.prompt_ids(messages[:1]), []
    for turn, (start, end) in enumerate(part.turn_spans):
        assert start == len(expected)
        ids = part.token_ids[start:end]
        sampled.append(ids)
        expected += ids
        if turn < 2:
            close = [] if ids[-1] == chat.end_of_turn_id else [chat.end_of_turn_id]  # a cut turn is closed for it
            expected += close + chat.observation_ids(observations[turn])
    assert part.token_ids == expected and part.calls == 3
    assert part.loss_mask == [any(s <= i < e for s, e in part.turn_spans) for i in range(len(expected))]
    # The response carries the behaviour log-probs of the content tokens, in order.
    for reply, ids, (start, end) in zip(replies, sampled, part.turn_spans):
        content = [t.logprob for t in reply.choices[0].logprobs.content]
        assert content == part.logprobs[start: start + len(content)]
        assert reply.usage.completion_tokens == len(ids)

    ids = torch.tensor([part.token_ids])
    learner, _ = token_logprobs(sharp_nano_model, ids, torch.ones_like(ids), temperature=1.0)
    mask = torch.tensor(part.loss_mask[1:])
    behaviour = torch.tensor(part.logprobs[1:])
    assert mask.sum() >= 3
    bound = logit_bound(sharp_nano_model, [part.token_ids])
    assert torch.allclose(learner[0][mask], behaviour[mask], atol=bound, rtol=0)
    # The bound is tight enough to see a one-token shift of the observation.
    shifted = torch.tensor(part.logprobs[2:] + [0.0])
    assert not torch.allclose(learner[0][mask], shifted[mask], atol=bound, rtol=0)
