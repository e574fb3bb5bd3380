"""Start and shutdown: nothing of the gateway outlives close(); `reinforge serve` serves a saved model."""

from __future__ import annotations

import socket
import threading
import time

import openai
import pytest

from reinforge.cli import main, parse_args
from reinforge.engines.base import SamplingParams
from reinforge.envs.chat_format import ChatFormat
from reinforge.gateway import Gateway
from reinforge.models.loading import save_model
from gateway_fakes import ScriptedEngine
from serving import served


def gateway_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("reinforge-gateway")]


def test_close_leaves_no_thread_and_no_port_and_is_idempotent(tokenizer, client_for) -> None:
    engine = ScriptedEngine(tokenizer, lambda call, row: "5", ChatFormat(tokenizer).end_of_turn_id)
    gateway = Gateway(engine, tokenizer)
    with gateway:
        assert len(gateway.threads) == 2 and all(t.is_alive() and t.daemon for t in gateway.threads)
        client = client_for(gateway.base_url, gateway.api_key)
        client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "x"}])
        port = gateway.port
    assert not any(t.is_alive() for t in gateway.threads) and not gateway_threads()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    gateway.close()  # again: nothing to do
    with pytest.raises(RuntimeError, match="cannot start again"):
        gateway.start()


def test_a_request_pending_at_close_is_answered_not_left_hanging(tokenizer, client_for) -> None:
    engine = ScriptedEngine(tokenizer, lambda call, row: "5", ChatFormat(tokenizer).end_of_turn_id)
    gateway = Gateway(engine, tokenizer, window_s=60.0).start()
    waiting = gateway.open_session("waiting", sampling=SamplingParams(max_new_tokens=2))
    gateway.open_session("other", sampling=SamplingParams(max_new_tokens=2))  # never sends: the flush would wait
    client = client_for(waiting.base_url, gateway.api_key)
    outcome: list[BaseException] = []

    def ask():
        try:
            client.chat.completions.create(model="policy", messages=[{"role": "user", "content": "x"}])
        except BaseException as err:  # the outcome is checked below
            outcome.append(err)

    asker = threading.Thread(target=ask)
    asker.start()
    deadline = time.monotonic() + 10
    while not gateway._batcher._pending and time.monotonic() < deadline:
        time.sleep(0.01)
    gateway.close()
    asker.join(15)
    assert not asker.is_alive() and len(outcome) == 1 and isinstance(outcome[0], openai.APIError)
    assert engine.calls == [] and not gateway_threads()


def test_sessions_need_a_started_gateway_and_unique_keys(tokenizer) -> None:
    engine = ScriptedEngine(tokenizer, lambda call, row: "5", ChatFormat(tokenizer).end_of_turn_id)
    gateway = Gateway(engine, tokenizer)
    with pytest.raises(RuntimeError, match="started"):
        gateway.open_session("a", sampling=SamplingParams())
    with gateway:
        session = gateway.open_session("a", sampling=SamplingParams())
        with pytest.raises(ValueError, match="already open"):
            gateway.open_session("a", sampling=SamplingParams())
        with pytest.raises(ValueError, match="key"):
            gateway.open_session("a/b", sampling=SamplingParams())
        session.finish()
        gateway.open_session("a", sampling=SamplingParams())  # free again once finished
    with pytest.raises(ValueError, match="tool_format"):
        Gateway(engine, tokenizer, tool_format="xml")


def test_reinforge_serve_serves_a_saved_model_until_stopped(tokenizer, nano_model, tmp_path, client_for) -> None:
    model_dir = save_model(nano_model, tokenizer, tmp_path / "tiny")
    assert parse_args(["serve", str(model_dir), "--tool-format", "hermes"]).tool_format == "hermes"
    with served(str(model_dir)) as server:
        gateway, out = server.gateway, server.out
        client = client_for(gateway.base_url, gateway.api_key)
        assert [m.id for m in client.models.list()] == ["tiny"]
        reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "1+2="}])
        assert 1 <= reply.usage.completion_tokens <= 3
    assert not server.thread.is_alive() and not gateway_threads()
    assert gateway.base_url in out.getvalue() and gateway.api_key in out.getvalue() and "1 requests" in out.getvalue()


def test_reinforge_serve_names_a_missing_model_dir(tmp_path, capsys) -> None:
    assert main(["serve", str(tmp_path / "nope")]) == 2
    assert "is not a local directory" in capsys.readouterr().err
