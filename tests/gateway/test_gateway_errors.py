"""Requests the gateway cannot serve get OpenAI-style errors (the openai client's own exception
classes), recorded on their session, and never a hang."""

from __future__ import annotations

import http.client
import json

import openai
import pytest

from reinforge.engines.base import SamplingParams
from reinforge.envs.chat_format import ChatFormat
from reinforge.gateway import Gateway
from gateway_fakes import ScriptedEngine

USER = [{"role": "user", "content": "1+1="}]


@pytest.fixture
def gateway(tokenizer):
    def script(call, row):
        return RuntimeError("device lost") if call == 1 else "2"

    engine = ScriptedEngine(tokenizer, script, ChatFormat(tokenizer).end_of_turn_id)
    with Gateway(engine, tokenizer, max_context_tokens=40, max_new_tokens=8) as gateway:
        yield gateway


def expect(error_class, code, fn):
    with pytest.raises(error_class) as caught:
        fn()
    body = caught.value.body
    assert set(body) >= {"message", "type", "param", "code"} and body["message"]
    if code is not None:
        assert body["code"] == code
    return caught.value


def test_key_model_and_session_errors(gateway, client_for) -> None:
    session = gateway.open_session("k", sampling=SamplingParams(max_new_tokens=4))
    expect(openai.AuthenticationError, "invalid_api_key",
           lambda: client_for(session.base_url, "wrong-key").chat.completions.create(model="policy", messages=USER))
    expect(openai.AuthenticationError, "invalid_api_key", lambda: client_for(gateway.base_url, "wrong").models.list())
    client = client_for(session.base_url, gateway.api_key)
    expect(openai.NotFoundError, "model_not_found", lambda: client.chat.completions.create(model="gpt-4o", messages=USER))
    unknown = client_for(session.base_url.replace("/k/", "/nobody/"), gateway.api_key)
    expect(openai.NotFoundError, "session_not_found", lambda: unknown.chat.completions.create(model="policy", messages=USER))
    assert [m.id for m in client.models.list()] == ["policy"]
    assert [e.split(":")[0] for e in session.errors] == ["404 model_not_found"]  # the bad key never reached the session


def test_limits_and_unsupported_options(gateway, client_for) -> None:
    session = gateway.open_session("lim", sampling=SamplingParams(max_new_tokens=4), max_calls=2, max_n=2)
    client = client_for(session.base_url, gateway.api_key)
    create = client.chat.completions.create
    expect(openai.BadRequestError, "n_too_large", lambda: create(model="policy", messages=USER, n=3))
    expect(openai.BadRequestError, "unsupported_parameter", lambda: create(model="policy", messages=USER, stream=True))
    expect(openai.BadRequestError, "unsupported_parameter", lambda: create(model="policy", messages=USER, tool_choice="required"))
    expect(openai.BadRequestError, "unsupported_parameter", lambda: create(
        model="policy", messages=USER, tool_choice={"type": "function", "function": {"name": "calculator"}}))
    expect(openai.BadRequestError, "unsupported_parameter", lambda: create(model="policy", messages=USER, logprobs=True, top_logprobs=2))
    expect(openai.BadRequestError, None, lambda: create(model="policy", messages=[]))
    expect(openai.BadRequestError, None, lambda: create(model="policy", messages=[{"role": "wizard", "content": "x"}]))
    long = [{"role": "user", "content": "1234567890" * 5}]
    error = expect(openai.BadRequestError, "context_length_exceeded", lambda: create(model="policy", messages=long))
    assert "40" in error.body["message"]
    assert session.calls == 0  # none of these was a model call
    # A prompt that fits gets max_tokens clamped to the room left in the context.
    fits = [{"role": "user", "content": "1234567890" * 3 + "123"}]
    room = 40 - len(ChatFormat(gateway.tokenizer).prompt_ids(fits))
    assert 0 < room < 4
    reply = create(model="policy", messages=fits, max_tokens=100)
    assert reply.usage.completion_tokens <= room and reply.usage.total_tokens <= 40
    assert gateway.engine.calls[-1][1].max_new_tokens == room
    expect(openai.InternalServerError, "engine_error", lambda: create(model="policy", messages=USER))  # the engine raises
    expect(openai.BadRequestError, "max_calls_exceeded", lambda: create(model="policy", messages=USER))
    assert session.calls == 2
    codes = [e.split(":")[0] for e in session.errors]
    assert codes == ["400 n_too_large"] + ["400 unsupported_parameter"] * 4 + ["400 invalid_request_error"] * 2 + [
                     "400 context_length_exceeded", "500 engine_error", "400 max_calls_exceeded"]
    assert "device lost" in session.errors[-2]
    assert gateway.stats()["errors"] == len(codes)


def test_an_engine_error_frees_the_join_point(gateway, client_for) -> None:
    session = gateway.open_session("e", sampling=SamplingParams(max_new_tokens=4), max_calls=3)
    client = client_for(session.base_url, gateway.api_key)
    first = client.chat.completions.create(model="policy", messages=USER)  # engine call 0
    nxt = USER + [first.choices[0].message.model_dump(exclude_none=True), {"role": "tool", "content": "2"}]
    expect(openai.InternalServerError, "engine_error", lambda: client.chat.completions.create(model="policy", messages=nxt))
    client.chat.completions.create(model="policy", messages=nxt)  # the retry joins the chain
    (part,) = session.parts()
    assert part.calls == 2 and session.splits == 0


def test_a_body_that_is_not_json_is_a_400_with_an_openai_error(gateway) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    connection.request("POST", "/v1/chat/completions", body=b"{not json",
                       headers={"Authorization": f"Bearer {gateway.api_key}", "Content-Type": "application/json"})
    reply = connection.getresponse()
    assert reply.status == 400 and "not JSON" in json.loads(reply.read())["error"]["message"]
    connection.request("GET", "/v2/nothing", headers={"Authorization": f"Bearer {gateway.api_key}"})
    reply = connection.getresponse()
    assert reply.status == 404 and json.loads(reply.read())["error"]["code"] == "not_found"
    connection.close()
