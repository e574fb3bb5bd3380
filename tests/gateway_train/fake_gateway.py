"""A small stand-in for reinforge.gateway.Gateway (the interface in docs/gateway.md), for the
trainer-side tests: a real HTTP server on 127.0.0.1 that the openai client in the agent process
talks to, backed by the engine. It keeps no history across calls: every call is its own
token-exact piece (the prompt rendered once, the sampled tokens as the engine gave them), so every
call after an episode's first is counted as a split. No batching window: calls run one at a time.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from reinforge.envs.chat_format import ChatFormat
from reinforge.envs.tools.calls import PARSERS, ToolCall, format_call
from reinforge.gateway.env import schema_registry


@dataclass
class Part:
    token_ids: list
    loss_mask: list
    logprobs: list
    turn_spans: list
    prompt_length: int
    finish_reason: str
    policy_version: int
    messages: list
    starts_with_split: bool
    branch: bool = False
    calls: int = 1


class FakeSession:
    def __init__(self, gateway, key, sampling, seed, max_calls, max_n, policy_version):
        self.gateway, self.key, self.sampling, self.seed = gateway, key, sampling, seed
        self.max_calls, self.max_n = max_calls, max_n
        self.base_url = f"{gateway.root}/sessions/{key}/v1"
        self.calls = self.splits = self.branches = 0
        self.errors: list[str] = []
        self._parts: list[Part] = []
        self.finished = False

    def finish(self):
        self.finished = True

    def parts(self):
        return list(self._parts)


class FakeGateway:
    instances: list = []

    def __init__(self, engine, tokenizer, model_name="policy", tool_format="compact", max_new_tokens=64,
                 max_context_tokens=None, window_s=0.02, max_batch=256):
        self.engine, self.tokenizer, self.model_name, self.tool_format = engine, tokenizer, model_name, tool_format
        self.max_new_tokens = max_new_tokens
        self.api_key = secrets.token_urlsafe(16)
        self.sessions: dict[str, FakeSession] = {}
        self._engine_lock = threading.Lock()
        self._server = None
        self._thread = None
        self.engine_calls = 0
        FakeGateway.instances.append(self)

    @property
    def root(self):
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def base_url(self):
        return f"{self.root}/v1"

    def start(self):
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def session(self):
                parts = self.path.split("/")
                return gateway.sessions.get(parts[2]) if len(parts) > 2 and parts[1] == "sessions" else None

            def authorized(self):
                if self.headers.get("Authorization") != f"Bearer {gateway.api_key}":
                    self.reply(401, {"error": {"message": "bad key", "type": "invalid_request_error"}})
                    return False
                return True

            def do_GET(self):
                if self.authorized():
                    self.reply(200, {"object": "list", "data": [{"id": gateway.model_name, "object": "model", "created": 0, "owned_by": "reinforge"}]})

            def do_POST(self):
                if not self.authorized():
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                session = self.session()
                if session is None:
                    return self.reply(404, {"error": {"message": "no such session", "type": "invalid_request_error"}})
                code, answer = gateway.complete(session, body)
                self.reply(code, answer)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def open_session(self, key, sampling, seed, max_calls, max_n, policy_version=None):
        session = FakeSession(self, key, sampling, seed, max_calls, max_n, policy_version)
        self.sessions[key] = session
        return session

    def render_message(self, message, registry):
        if message.get("role") == "assistant" and message.get("tool_calls"):
            calls = [format_call(ToolCall(c["function"]["name"], json.loads(c["function"]["arguments"])), self.tool_format, registry)
                     for c in message["tool_calls"]]
            return {"role": "assistant", "content": (message.get("content") or "") + "".join(calls)}
        return {"role": message["role"], "content": message.get("content") or ""}

    def complete(self, session, body):
        if body.get("model") != self.model_name:
            return 404, {"error": {"message": f"unknown model {body.get('model')}", "type": "invalid_request_error"}}
        if session.calls >= session.max_calls:
            session.errors.append("max_calls")
            return 400, {"error": {"message": "too many model calls", "type": "invalid_request_error"}}
        tools = body.get("tools")
        registry = schema_registry(tools)
        chat = ChatFormat(self.tokenizer, tools=tools)
        prompt = chat.prompt_ids([self.render_message(m, registry) for m in body["messages"]])
        params = replace(session.sampling, max_new_tokens=min(body.get("max_tokens") or self.max_new_tokens, session.sampling.max_new_tokens))
        with self._engine_lock:
            generation = self.engine.generate([prompt], params, seed=session.seed + session.calls)[0]
            self.engine_calls += 1
        text = self.tokenizer.decode(generation.token_ids, skip_special_tokens=True)
        parsed = PARSERS[self.tool_format](text, registry) if tools else None
        message = {"role": "assistant", "content": text}
        finish = "stop" if generation.finish_reason == "stop" else "length"
        if parsed is not None and parsed.calls:
            message = {"role": "assistant", "content": parsed.text or None, "tool_calls": [
                {"id": f"call_{session.calls}_{i}", "type": "function",
                 "function": {"name": c.name, "arguments": json.dumps(c.arguments)}} for i, c in enumerate(parsed.calls)]}
            finish = "tool_calls"
        start = len(prompt)
        session._parts.append(Part(
            token_ids=prompt + list(generation.token_ids), loss_mask=[False] * start + [True] * len(generation.token_ids),
            logprobs=[0.0] * start + list(generation.logprobs), turn_spans=[(start, start + len(generation.token_ids))],
            prompt_length=start, finish_reason="stop" if finish == "tool_calls" else finish,
            policy_version=generation.policy_version, messages=list(body["messages"]) + [message],
            starts_with_split=session.calls > 0,
        ))
        session.splits += session.calls > 0
        session.calls += 1
        return 200, {"id": f"chatcmpl-{session.key}-{session.calls}", "object": "chat.completion", "created": int(time.time()),
                     "model": self.model_name, "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                     "usage": {"prompt_tokens": start, "completion_tokens": len(generation.token_ids), "total_tokens": start + len(generation.token_ids)}}

    def stats(self):
        return {"engine_calls": self.engine_calls}

    def close(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
