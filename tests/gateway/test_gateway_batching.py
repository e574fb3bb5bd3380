"""The batcher's flush rule through the HTTP server: 64 agents at once share one engine call."""

from __future__ import annotations

import asyncio

from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.chat_format import ChatFormat
from reinforge.gateway import Gateway
from gateway_fakes import CountingEngine


def test_64_sessions_each_sending_one_request_make_exactly_one_engine_call(tokenizer, nano_model, client_for) -> None:
    engine = CountingEngine(TorchEngine(nano_model, tokenizer.pad_token_id))
    chat = ChatFormat(tokenizer)
    run = SamplingParams(max_new_tokens=3, stop_token_ids=(chat.end_of_turn_id,))
    # A window far longer than the test: the only flush that can happen is "every open session has
    # a request pending", so one engine call proves the rule (not a race with a timer).
    with Gateway(engine, tokenizer, max_new_tokens=4, window_s=60.0) as gateway:
        sessions = [gateway.open_session(f"s{i}", sampling=run, seed=i, max_calls=1) for i in range(64)]

        async def main():
            # One connection pool; each agent's client has its session's base_url (with_options shares it).
            shared = client_for(gateway.base_url, gateway.api_key, asynchronous=True)
            async with shared:
                # different prompts and max_tokens: still one call (budgets per row)
                return await asyncio.gather(*(
                    shared.with_options(base_url=session.base_url).chat.completions.create(
                        model="policy", messages=[{"role": "user", "content": f"{i}+{i}="}], max_tokens=2 + i % 2)
                    for i, session in enumerate(sessions)))

        replies = asyncio.run(main())
        for session in sessions:
            session.finish()
        stats = gateway.stats()

    assert len(engine.calls) == 1
    prompts, params, budgets = engine.calls[0]
    assert len(prompts) == 64 and stats["rows"] == 64 and stats["mean_batch_fill"] == 1.0
    # rows in session open order, each with its own prompt and budget
    assert prompts == [chat.prompt_ids([{"role": "user", "content": f"{i}+{i}="}]) for i in range(64)]
    assert budgets == [2 + i % 2 for i in range(64)] and params.max_new_tokens == 3
    for i, (session, reply) in enumerate(zip(sessions, replies)):
        (part,) = session.parts()
        assert part.token_ids[: part.prompt_length] == prompts[i]
        assert reply.usage.completion_tokens == len(part.token_ids) - part.prompt_length <= 2 + i % 2


def test_a_session_busy_elsewhere_does_not_hold_the_others_past_the_window(tokenizer, nano_model, client_for) -> None:
    engine = CountingEngine(TorchEngine(nano_model, tokenizer.pad_token_id))
    run = SamplingParams(max_new_tokens=2)
    with Gateway(engine, tokenizer, max_new_tokens=2, window_s=0.05) as gateway:
        asking = gateway.open_session("asking", sampling=run, max_calls=2)
        gateway.open_session("busy", sampling=run)  # e.g. running a tool: sends nothing
        client = client_for(asking.base_url, gateway.api_key)
        reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "1+1="}])
        assert reply.choices[0].message.content is not None
        stats = gateway.stats()
    assert len(engine.calls) == 1 and stats["rows"] == 1 and stats["mean_batch_fill"] == 0.5
