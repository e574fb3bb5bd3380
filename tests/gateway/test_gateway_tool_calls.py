"""Function calling with the openai client: the model's call markup -> tool_calls, the agent's tool
result back in, and the next call joins the same token-exact chain."""

from __future__ import annotations

import copy
import json

import openai
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
    engine = ScriptedEngine(tokenizer, lambda call, row: "é→7", chat.end_of_turn_id)
    with Gateway(engine, tokenizer, model_name="tiny") as gateway:
        client = client_for(gateway.base_url, gateway.api_key)
        assert [m.id for m in client.models.list()] == ["tiny"]
        reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "3+4="}],
                                               temperature=0.5, n=2, logprobs=True)
        assert [c.message.content for c in reply.choices] == ["é→7", "é→7"]
        # Per-token log-probs of the content (the end-of-turn token is not content), with each
        # token's own bytes: byte-level tokens split "→" mid-character, their bytes still add up.
        tokens = reply.choices[0].logprobs.content
        n = len(tokenizer("é→7", add_special_tokens=False).input_ids)
        assert [t.logprob for t in tokens] == pytest.approx([-0.1 * (i + 1) for i in range(n)])
        assert b"".join(bytes(t.bytes) for t in tokens) == "é→7".encode()
        (prompts, params), = engine.calls
        assert params.temperature == 0.5 and len(prompts) == 2  # the request's own sampling settings
        assert gateway.stats()["open_sessions"] == 0


def test_content_parts_extra_fields_and_n_choices_in_a_session(tokenizer, client_for) -> None:
    chat = ChatFormat(tokenizer)
    engine = ScriptedEngine(tokenizer, lambda call, row: str(row + 1), chat.end_of_turn_id)
    with Gateway(engine, tokenizer) as gateway:
        session = gateway.open_session("parts", sampling=SamplingParams(max_new_tokens=4), max_calls=2, max_n=2)
        client = client_for(session.base_url, gateway.api_key)
        parts = [{"role": "system", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
                 {"role": "user", "content": "3-1="}]
        # Fields the gateway does not know are ignored, as agents send many.
        reply = client.chat.completions.create(model="policy", messages=parts, n=2, user="u1", parallel_tool_calls=False,
                                               extra_body={"metadata": {"run": 1}, "frequency_penalty": 0})
        assert [c.message.content for c in reply.choices] == ["1", "2"] and [c.index for c in reply.choices] == [0, 1]
        # The agent keeps choice 1 and goes on: it continues the branch chain.
        messages = parts + [reply.choices[1].message.model_dump(exclude_none=True), {"role": "user", "content": "ok"}]
        client.chat.completions.create(model="policy", messages=messages)
        session.finish()
        main, branch = session.parts()
    prompt = chat.prompt_ids([{"role": "system", "content": "be brief"}, {"role": "user", "content": "3-1="}])
    assert main.token_ids[: main.prompt_length] == prompt and main.calls == 1 and not main.branch
    assert branch.branch and branch.calls == 2 and branch.prompt_length == len(prompt)
    assert session.branches == 1 and session.splits == 0
    with pytest.raises(openai.BadRequestError) as caught:
        with Gateway(engine, tokenizer) as gateway:
            client_for(gateway.base_url, gateway.api_key).chat.completions.create(model="policy", messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}])
    assert caught.value.status_code == 400 and "image_url" in caught.value.body["message"]


# Qwen2.5-like: the template writes `tool_calls` itself (hermes markup), tool replies go in a user
# turn, and "\n" follows every <|im_end|> (so the observation starts with it; written as {{ '\\n' }}
# because `{%-` would strip a literal one).
CHATML_TOOLS = (
    "{%- if tools %}<|im_start|>system\nTools: {% for t in tools %}{{ t.function.name }} {% endfor %}<|im_end|>{{ '\\n' }}{% endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>\n{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}"
    "\n</tool_call>{%- endfor %}<|im_end|>{{ '\\n' }}"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>{{ '\\n' }}"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{{ '\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_that_renders_tool_calls_itself_joins_too(tokenizer, client_for) -> None:
    chatml = copy.deepcopy(tokenizer)
    chatml.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    chatml.chat_template = CHATML_TOOLS
    chat = ChatFormat(chatml, tools=[CALCULATOR])
    engine = ScriptedEngine(chatml, lambda call, row: CALL_TEXT["hermes"] if call == 0 else "408", chat.end_of_turn_id)
    with Gateway(engine, chatml, tool_format="hermes") as gateway:
        assert not gateway._inline_calls  # the template shows the calls; they are not written into content
        session = gateway.open_session("chatml", sampling=SamplingParams(max_new_tokens=64), max_calls=2)
        client = client_for(session.base_url, gateway.api_key)
        messages = [{"role": "user", "content": "12*34="}]
        first = client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
        (tool_call,) = first.choices[0].message.tool_calls
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": tool_call.id, "content": "408"}]
        client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR])
        session.finish()
        (part,) = session.parts()
    observation = chat.observation_ids([{"role": "tool", "content": "408"}])
    assert chatml.decode(observation).startswith("\n<|im_start|>user\n<tool_response>\n408")
    call_ids = chatml(CALL_TEXT["hermes"], add_special_tokens=False).input_ids + [chat.end_of_turn_id]
    answer_ids = chatml("408", add_special_tokens=False).input_ids + [chat.end_of_turn_id]
    assert part.token_ids == chat.prompt_ids(messages[:1]) + call_ids + observation + answer_ids and session.splits == 0
