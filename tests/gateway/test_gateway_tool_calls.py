"""Function calling with the openai client: the model's call markup -> tool_calls, the agent's tool
result back in, and the next call joins the same token-exact chain."""

from __future__ import annotations

import json

import pytest

from reinforge.engines.base import SamplingParams
from reinforge.envs.chat_format import ChatFormat
from reinforge.gateway import Gateway
from reinforge.gateway.tool_calls import RequestTools, parse_completion
from reinforge.gateway.wire import ToolSpec
from gateway_fakes import ScriptedEngine

CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}

CALL_TEXT = {
    "compact": "<<calculator: 12*34>>",
    "hermes": '<tool_call>{"name": "calculator", "arguments": {"expression": "12*34"}}</tool_call>',
}


@pytest.mark.parametrize("style", ["compact", "hermes"])
def test_function_calling_round_trip_joins_into_one_part(style, tokenizer, client_for) -> None:
    chat = ChatFormat(tokenizer, tools=[CALCULATOR])
    engine = ScriptedEngine(tokenizer, lambda call, row: CALL_TEXT[style] if call == 0 else "408", chat.end_of_turn_id)
    with Gateway(engine, tokenizer, tool_format=style) as gateway:
        session = gateway.open_session("fc", sampling=SamplingParams(max_new_tokens=64), max_calls=2)
        client = client_for(session.base_url, gateway.api_key)
        messages = [{"role": "user", "content": "12*34="}]
        first = client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR], tool_choice="auto")
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (tool_call,) = choice.message.tool_calls
        assert tool_call.type == "function" and tool_call.id.startswith("call_")
        assert tool_call.function.name == "calculator" and json.loads(tool_call.function.arguments) == {"expression": "12*34"}

        # The agent runs its tool and sends the result back, as OpenAI agents do.
        messages += [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": tool_call.id, "content": "408"}]
        second = client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
        assert second.choices[0].message.content == "408" and second.choices[0].finish_reason == "stop"
        assert second.choices[0].message.tool_calls is None
        session.finish()
        (part,) = session.parts()

    assert session.splits == 0 and session.calls == 2 and session.malformed_tool_calls == 0
    call_ids = tokenizer(CALL_TEXT[style], add_special_tokens=False).input_ids + [chat.end_of_turn_id]
    answer_ids = tokenizer("408", add_special_tokens=False).input_ids + [chat.end_of_turn_id]
    observation = chat.observation_ids([{"role": "tool", "content": "408"}])
    assert part.token_ids == chat.prompt_ids(messages[:1]) + call_ids + observation + answer_ids
    assert part.messages[-1] == {"role": "assistant", "content": "408"} and part.messages[1]["tool_calls"][0]["id"] == tool_call.id


def test_malformed_calls_come_back_as_text_and_are_counted(tokenizer, client_for) -> None:
    chat = ChatFormat(tokenizer)
    engine = ScriptedEngine(tokenizer, lambda call, row: "<<calculator: 1+", chat.end_of_turn_id)
    with Gateway(engine, tokenizer) as gateway:
        session = gateway.open_session("bad", sampling=SamplingParams(max_new_tokens=16))
        client = client_for(session.base_url, gateway.api_key)
        reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], tools=[CALCULATOR])
        assert reply.choices[0].message.content == "<<calculator: 1+" and reply.choices[0].message.tool_calls is None
        assert reply.choices[0].finish_reason == "stop"
        # tool_choice "none": the markup is not read as a call at all, and nothing is malformed.
        plain = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}],
                                               tools=[CALCULATOR], tool_choice="none")
        assert plain.choices[0].message.content == "<<calculator: 1+"
        assert session.malformed_tool_calls == 1 and gateway.stats()["malformed_tool_calls"] == 1


def test_compact_plain_text_binds_to_the_single_parameter_of_the_request_schema() -> None:
    tools = RequestTools([ToolSpec.model_validate(CALCULATOR)])
    parsed = parse_completion("let me see <<calculator: 2+2>>", "compact", tools)
    assert parsed.content == "let me see" and json.loads(parsed.tool_calls[0].function.arguments) == {"expression": "2+2"}
    unknown = parse_completion("<<weather: Paris>>", "compact", tools)  # plain text needs a known tool
    assert unknown.tool_calls == [] and unknown.malformed and unknown.content == "<<weather: Paris>>"
    two = parse_completion('<<calculator: 1+1>><<calculator: {"expression": "3"}>>', "compact", tools)
    assert [json.loads(c.function.arguments) for c in two.tool_calls] == [{"expression": "1+1"}, {"expression": "3"}]
    assert len({c.id for c in two.tool_calls}) == 2


def test_stop_strings_cut_the_content_and_the_recorded_tokens(tokenizer, client_for) -> None:
    chat = ChatFormat(tokenizer)
    engine = ScriptedEngine(tokenizer, lambda call, row: "12+34=46", chat.end_of_turn_id)
    with Gateway(engine, tokenizer) as gateway:
        session = gateway.open_session("stop", sampling=SamplingParams(max_new_tokens=16), max_calls=2)
        client = client_for(session.base_url, gateway.api_key)
        messages = [{"role": "user", "content": "q"}]
        reply = client.chat.completions.create(model="policy", messages=messages, stop=["="])
        assert reply.choices[0].message.content == "12+34" and reply.choices[0].finish_reason == "stop"
        messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "and?"}]
        client.chat.completions.create(model="policy", messages=messages)
        session.finish()
        (part,) = session.parts()
    kept = tokenizer("12+34=", add_special_tokens=False).input_ids  # through the token completing "="
    start, end = part.turn_spans[0]
    assert part.token_ids[start:end] == kept and reply.usage.completion_tokens == len(kept)
    assert part.token_ids[end] == chat.end_of_turn_id and not part.loss_mask[end]  # closed as observation


def test_the_plain_endpoint_serves_and_records_nothing(tokenizer, client_for) -> None:
    chat = ChatFormat(tokenizer)
    engine = ScriptedEngine(tokenizer, lambda call, row: "7", chat.end_of_turn_id)
    with Gateway(engine, tokenizer, model_name="tiny") as gateway:
        client = client_for(gateway.base_url, gateway.api_key)
        assert [m.id for m in client.models.list()] == ["tiny"]
        reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "3+4="}],
                                               temperature=0.5, n=2)
        assert [c.message.content for c in reply.choices] == ["7", "7"]
        (prompts, params), = engine.calls
        assert params.temperature == 0.5 and len(prompts) == 2  # the request's own sampling settings
        assert gateway.stats()["open_sessions"] == 0
