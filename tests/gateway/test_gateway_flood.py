"""One request cannot freeze the gateway: an over-size body gets a 413 before it is parsed, a prompt
that cannot fit the context is refused from its characters without being tokenized, and a request
whose tokenization is slow (held here until the test releases it) does not delay anyone else: a
flood of bad requests and a good one are all answered while it is still being tokenized."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from reinforge.engines.base import SamplingParams
from reinforge.envs.chat_format import ChatFormat
from reinforge.envs.control_tokens import ControlTokens
from reinforge.gateway import Gateway
from gateway_fakes import ScriptedEngine

HANG_GUARD_S = 60.0  # no test here may hang: a held tokenization gives up after this
SLOW = "please-tokenize-me-slowly"


def make_gateway(tokenizer, **kwargs) -> Gateway:
    engine = ScriptedEngine(tokenizer, lambda call, row: "ok", ChatFormat(tokenizer).end_of_turn_id)
    return Gateway(engine, tokenizer, **kwargs)


def chat_body(content: str, model: str = "policy") -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": content}]}).encode()


def post(gateway: Gateway, path: str, body, url: str | None = None, **kwargs) -> httpx.Response:
    headers = {"Authorization": f"Bearer {gateway.api_key}", "Content-Type": "application/json"}
    with httpx.Client(timeout=20.0) as client:
        return client.post((url or gateway.base_url) + path, content=body, headers=headers, **kwargs)


def test_an_over_size_body_gets_413_before_it_is_parsed(tokenizer) -> None:
    with make_gateway(tokenizer, max_body_bytes=64 * 1024) as gateway:
        big = chat_body("x" * 1_000_000)
        declared = post(gateway, "/chat/completions", big)
        streamed = post(gateway, "/chat/completions", iter([big[i: i + 65536] for i in range(0, len(big), 65536)]))
        text = post(gateway, "/completions", json.dumps({"model": "policy", "prompt": "x" * 100_000}).encode())
        small = post(gateway, "/chat/completions", chat_body("12+3="))
        stats = gateway.stats()
    for reply in (declared, streamed, text):
        assert reply.status_code == 413, reply.text
        error = reply.json()["error"]
        assert error["code"] == "request_too_large" and "max_body_bytes" in error["message"]
        assert "65536 bytes" in error["message"]
    assert small.status_code == 200 and small.json()["choices"][0]["message"]["content"] == "ok"
    assert stats["errors"] == 3 and stats["engine_calls"] == 1


def test_a_prompt_that_cannot_fit_is_refused_without_being_tokenized(tokenizer, monkeypatch) -> None:
    tokenized: list[int] = []
    real_call = type(tokenizer).__call__

    def spy(self, text, *args, **kwargs):
        tokenized.append(len(text) if isinstance(text, str) else 0)
        return real_call(self, text, *args, **kwargs)

    with make_gateway(tokenizer, max_context_tokens=256) as gateway:
        monkeypatch.setattr(type(tokenizer), "__call__", spy)
        long = "1+2=3; " * 2000  # 14,000 characters: at least 14000 / 16 tokens for this tokenizer, over 256
        chat = post(gateway, "/chat/completions", chat_body(long))
        text = post(gateway, "/completions", json.dumps({"model": "policy", "prompt": long}).encode())
        fits = post(gateway, "/chat/completions", chat_body("1+2=3; " * 10))
    for reply in (chat, text):
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert error["code"] == "context_length_exceeded" and "characters, so at least" in error["message"]
    assert fits.status_code == 200
    assert tokenized and max(tokenized) < 1000  # the short prompt was tokenized, the long ones never


@pytest.fixture
def held_tokenization(monkeypatch):
    """Tokenizing a text that holds SLOW waits until the test sets `release` (entered is set then)."""
    entered, release = threading.Event(), threading.Event()
    real_encode = ControlTokens.encode

    def encode(self, text):
        if SLOW in text:
            entered.set()
            release.wait(HANG_GUARD_S)
        return real_encode(self, text)

    monkeypatch.setattr(ControlTokens, "encode", encode)
    yield entered, release
    release.set()


def test_a_flood_of_bad_requests_and_a_good_one_are_answered_while_a_prompt_is_tokenized(
        tokenizer, held_tokenization) -> None:
    entered, release = held_tokenization
    with make_gateway(tokenizer, max_body_bytes=256 * 1024, max_context_tokens=512) as gateway:
        session = gateway.open_session("good", sampling=SamplingParams(max_new_tokens=4), max_calls=2)
        slow_reply: list[httpx.Response] = []
        slow = threading.Thread(target=lambda: slow_reply.append(post(gateway, "/chat/completions", chat_body(SLOW))))
        slow.start()
        assert entered.wait(HANG_GUARD_S), "the slow request never reached its tokenization"

        async def flood() -> tuple[list[int], httpx.Response]:
            headers = {"Authorization": f"Bearer {gateway.api_key}", "Content-Type": "application/json"}
            limits = httpx.Limits(max_connections=64)
            async with httpx.AsyncClient(timeout=20.0, limits=limits, headers=headers) as client:
                url = gateway.base_url + "/chat/completions"
                bad = [
                    *(client.post(url, content=b"{not json") for _ in range(10)),
                    *(client.post(url, content=chat_body("hi", model="other")) for _ in range(10)),
                    *(client.post(url, content=chat_body("x" * 400_000)) for _ in range(10)),
                    *(client.post(url, content=chat_body("1+2=3; " * 5000)) for _ in range(10)),
                ]
                good = client.post(session.base_url + "/chat/completions", content=chat_body("12+3="))
                *answers, good_reply = await asyncio.gather(*bad, good)
                return [a.status_code for a in answers], good_reply

        statuses, good_reply = asyncio.run(flood())
        # everything above was answered while the slow prompt was still being tokenized
        assert slow.is_alive() and not slow_reply
        release.set()
        slow.join(HANG_GUARD_S)
        session.finish()
        stats = gateway.stats()
    assert statuses == [400] * 10 + [404] * 10 + [413] * 10 + [400] * 10
    assert good_reply.status_code == 200 and good_reply.json()["choices"][0]["message"]["content"] == "ok"
    assert slow_reply[0].status_code == 200
    assert stats["errors"] == 40 and stats["requests"] == 42


def test_a_request_abandoned_while_it_is_tokenized_hands_its_plan_back(tokenizer, held_tokenization) -> None:
    from reinforge.gateway.chat_completions import _prepared
    from reinforge.gateway.wire import parse_request

    entered, release = held_tokenization
    with make_gateway(tokenizer) as gateway:
        session = gateway.open_session("s", sampling=SamplingParams(max_new_tokens=4), max_calls=4)
        request = parse_request(json.loads(chat_body(SLOW)))

        async def abandon() -> None:
            task = asyncio.ensure_future(_prepared(gateway, request, session))
            while not entered.is_set():
                await asyncio.sleep(0.01)
            task.cancel()  # what a server shutting down does to a handler in flight
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(abandon())
        release.set()
        planned = None
        for _ in range(1000):  # the held preparation finishes in its worker thread, then hands its plan back
            with session.lock:
                planned = session.recorder._new_chains_planned
            if planned == 0:
                break
            time.sleep(0.01)
        # a later request starts the session's first chain, not a "split" behind a phantom one
        reply = post(gateway, "/chat/completions", chat_body("12+3="), url=session.base_url)
        session.finish()
    assert planned == 0
    assert reply.status_code == 200 and session.splits == 0
