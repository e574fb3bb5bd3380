"""An OpenAI-compatible HTTP endpoint backed by a reinforge Engine, with per-episode sessions.

    with Gateway(engine, tokenizer, model_name="policy") as gateway:
        session = gateway.open_session("g0-e0", sampling=params, seed=7, max_calls=4, max_n=8)
        # the agent: AsyncOpenAI(base_url=session.base_url, api_key=gateway.api_key)
        session.finish()
        parts = session.parts()   # token-exact TrajectoryParts (reinforge.gateway.recorder)

The server (FastAPI on uvicorn) runs in a daemon thread of this process, on a socket bound to
127.0.0.1 port 0 (a free port; never another interface), and every route needs the run's API key
(`Authorization: Bearer <key>`, a fresh `secrets.token_urlsafe` per Gateway). Routes:
`/v1/models`, `/v1/chat/completions` and `/v1/completions` (text in, no chat template:
reinforge.gateway.text_completions) on the plain `base_url` (requests are served with the
request's own sampling settings and nothing is recorded), and the first two under each session's
`/sessions/<key>/v1`, where every call is recorded by the session's EpisodeRecorder and the
session's SamplingParams win over the request's temperature / top_p / top_k (each override is
counted in `session.overridden_params`; max_tokens is capped by the session's max_new_tokens, and
the seeds come from the session's seed, not the request's).

Requests are rendered with the tokenizer's chat template, batched into engine calls by the
Batcher (reinforge.gateway.batcher: its docstring gives the flush rule) and answered with the
sampled text, parsed into `tool_calls` in the model's call format. What the gateway cannot serve
gets an OpenAI-style error, never a hang: unknown model (404), unknown session (404), `n` over
the session's max_n, calls over max_calls, a prompt that leaves no room in the context
(`context_length_exceeded`), unsupported options (400), an engine that raises (500), a body over
`max_body_bytes` (413, before it is parsed). Errors on a session are recorded in `session.errors`.

One request cannot freeze the others: the event loop serving every client only reads bodies
(bounded) and answers; parsing, rendering and tokenizing run in worker threads (`offload`), after a
cheap bound on the prompt's characters (reinforge.gateway.prompt_bound) has refused any prompt that
cannot fit the context. The chat route itself is reinforge.gateway.chat_completions.

`close()` (or leaving the `with`) stops the batcher and the server, joins their threads and
closes the socket; it is idempotent and also registered with `atexit` as a fallback.

`chat_warning`: a model that was trained on raw prompts answers chat requests in a format it never
saw; `reinforge serve` passes a warning then, and every plain chat response carries it (header
`X-Reinforge-Warning` and a `warning` field), so the mismatch is never silent.
"""

from __future__ import annotations

import asyncio
import atexit
import copy
import http.client
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from transformers import PreTrainedTokenizerBase

from reinforge.engines.base import SamplingParams
from reinforge.envs.tools.calls import PARSERS
from reinforge.gateway.batcher import Batcher
from reinforge.gateway.chat_completions import complete_chat
from reinforge.gateway.completions import SampledText
from reinforge.gateway.prompt_bound import PromptBound
from reinforge.gateway.recorder import EpisodeRecorder, TrajectoryPart
from reinforge.gateway.request_body import DEFAULT_MAX_BODY_BYTES, read_body
from reinforge.gateway.text_completions import complete_text
from reinforge.gateway.tool_calls import template_renders_tool_calls
from reinforge.gateway.wire import GatewayError, ModelCard, ModelList, parse_request

log = logging.getLogger(__name__)
START_TIMEOUT_S = 30.0
# Threads that parse and tokenize requests. Many, because one long request must not queue the short
# ones behind it; the tokenizer releases the GIL while it encodes, so they share the cores fairly.
PREPARE_WORKERS = 16
T = TypeVar("T")


@dataclass
class GatewaySession:
    """One agent episode's endpoint and records. Made by `Gateway.open_session`."""

    key: str
    base_url: str
    sampling: SamplingParams
    seed: int
    max_calls: int
    max_n: int
    policy_version: int | None  # the caller's learner version at open time, kept for its records (parts
    # carry the version each engine call reported, which is what staleness checks need)
    recorder: EpisodeRecorder
    order: int
    _gateway: "Gateway" = field(repr=False)
    calls: int = 0
    overridden_params: int = 0
    malformed_tool_calls: int = 0
    errors: list[str] = field(default_factory=list)
    finished: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # its recorder and counters

    @property
    def splits(self) -> int:
        return self.recorder.splits

    @property
    def branches(self) -> int:
        return self.recorder.branches

    def finish(self) -> None:
        """The agent is done: the batcher stops waiting for this session; later requests get 404."""
        if not self.finished:
            self.finished = True
            self._gateway._finish(self)

    def parts(self) -> list[TrajectoryPart]:
        """The episode's token-exact trajectory parts, in the order their chains began."""
        with self.lock:
            return self.recorder.parts()


class Gateway:
    """OpenAI-compatible server over `engine` (see the module docstring)."""

    def __init__(
        self,
        engine: Any,
        tokenizer: PreTrainedTokenizerBase,
        model_name: str = "policy",
        tool_format: str = "compact",
        max_new_tokens: int = 64,
        max_context_tokens: int | None = None,
        window_s: float = 0.05,
        max_batch: int = 256,
        port: int = 0,
        chat_warning: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ):
        if tool_format not in PARSERS:
            raise ValueError(f"unknown tool_format {tool_format!r}; known formats: {', '.join(sorted(PARSERS))}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {max_body_bytes}")
        # A copy: the server thread tokenizes while the caller's thread may use its own tokenizer, and a
        # Rust-backed tokenizer whose padding / truncation settings change under it raises "Already borrowed".
        tokenizer = copy.deepcopy(tokenizer)
        self.engine, self.tokenizer, self.model_name = engine, tokenizer, model_name
        self.tool_format, self.max_new_tokens = tool_format, max_new_tokens
        self.max_context_tokens = max_context_tokens if max_context_tokens is not None else _engine_context(engine)
        self.window_s, self.max_batch, self.requested_port = window_s, max_batch, port
        self.chat_warning, self.max_body_bytes = chat_warning, max_body_bytes
        self.prompt_bound = PromptBound(tokenizer, self.max_context_tokens)
        self.api_key = secrets.token_urlsafe(32)
        self._texts = SampledText(tokenizer)
        self._plain = EpisodeRecorder(tokenizer)  # only its template cache: plain requests are not recorded
        self._inline_calls = not template_renders_tool_calls(self._plain.chat(None).template)
        self._stop_ids = tuple(dict.fromkeys(i for i in (self._plain.chat(None).end_of_turn_id, tokenizer.eos_token_id)
                                             if i is not None))
        self._lock = threading.Lock()  # the session table and the counts (held briefly, never while tokenizing)
        self._sessions: dict[str, GatewaySession] = {}
        self._opened = 0
        self._counts = {"requests": 0, "errors": 0, "malformed_tool_calls": 0}
        self._batcher: Batcher | None = None
        self._workers: ThreadPoolExecutor | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.port: int | None = None
        self._closed = False
        self.app = self._build_app()

    # --- lifecycle ------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the gateway is not started: use `with Gateway(...) as gateway` or call start()")
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "Gateway":
        """Bind 127.0.0.1 on a free port, serve from a daemon thread, return once it answers."""
        if self._closed:
            raise RuntimeError("a closed Gateway cannot start again; make a new one")
        if self._thread is not None:
            return self
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", self.requested_port))  # loopback only, by design
        except OSError as err:
            sock.close()
            raise RuntimeError(f"cannot bind 127.0.0.1:{self.requested_port} ({err}); pick another port "
                               "or 0 for a free one") from None
        # Accepted connections inherit TCP_NODELAY on Linux: without it a keep-alive response written in
        # two parts (headers, body) waits ~40 ms for the client's delayed ACK (Nagle), on every request.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._socket = sock
        self._batcher = Batcher(self.engine, self.window_s, self.max_batch)
        self.port = self._socket.getsockname()[1]
        self._workers = ThreadPoolExecutor(PREPARE_WORKERS, thread_name_prefix=f"reinforge-gateway-prepare-{self.port}")
        # log_config=None: uvicorn's default would dictConfig this process's logging (the trainer's)
        config = uvicorn.Config(self.app, log_config=None, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2, timeout_keep_alive=5)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name=f"reinforge-gateway-{self.port}", daemon=True)
        atexit.register(self.close)
        self._thread.start()
        try:
            self._wait_until_serving()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise RuntimeError("the gateway's server thread exited during start-up (see the log above)")
            if self._server.started:
                # stdlib HTTP: an httpx client costs ~0.1 s to make (its SSL context), this costs nothing
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5.0)
                try:
                    connection.request("GET", "/v1/models", headers={"Authorization": f"Bearer {self.api_key}"})
                    reply = connection.getresponse()
                    status, text = reply.status, reply.read().decode(errors="replace")
                finally:
                    connection.close()
                if status == 200:
                    return
                raise RuntimeError(f"the gateway answered its start-up check with HTTP {status}: {text}")
            time.sleep(0.005)
        raise RuntimeError(f"the gateway did not start serving within {START_TIMEOUT_S:.0f} s")

    def close(self) -> None:
        """Stop serving: pending requests fail, the threads are joined, the port is closed. Idempotent."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        if self._batcher is not None:
            self._batcher.close()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10.0)
        if self._workers is not None:  # after the server: no request is handed to them any more
            self._workers.shutdown(wait=True, cancel_futures=True)
        if self._socket is not None:
            self._socket.close()

    def __enter__(self) -> "Gateway":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def engine_lock(self) -> threading.Lock:
        """Held while the gateway's worker calls the engine: hold it to sync weights mid-run."""
        if self._batcher is None:
            raise RuntimeError("the gateway is not started")
        return self._batcher.engine_lock

    @property
    def threads(self) -> list[threading.Thread]:
        """The gateway's own threads (server, engine worker), for checks that none is left."""
        threads = [self._thread, self._batcher._thread if self._batcher else None]
        return [t for t in threads if t is not None]

    # --- sessions -------------------------------------------------------------------------------
    def open_session(self, key: str, sampling: SamplingParams, seed: int = 0, max_calls: int = 16, max_n: int = 1,
                     policy_version: int | None = None) -> GatewaySession:
        if self.port is None or self._closed:
            raise RuntimeError("open_session needs a started gateway (inside `with Gateway(...)`)")
        if not isinstance(key, str) or not key or "/" in key or key != key.strip():
            raise ValueError(f"session key must be a non-empty string without '/' or surrounding spaces, got {key!r}")
        if max_calls < 1 or max_n < 1:
            raise ValueError(f"max_calls and max_n must be >= 1, got {max_calls} and {max_n}")
        if max_n > self.max_batch:
            raise ValueError(f"max_n={max_n} is more than the gateway's max_batch={self.max_batch}")
        with self._lock:
            if key in self._sessions:
                raise ValueError(f"a session with key {key!r} is already open; finish it first or use another key")
            self._opened += 1
            session = GatewaySession(
                key=key, base_url=f"http://127.0.0.1:{self.port}/sessions/{key}/v1", sampling=sampling, seed=seed,
                max_calls=max_calls, max_n=max_n, policy_version=policy_version,
                recorder=EpisodeRecorder(self.tokenizer), order=self._opened, _gateway=self,
            )
            self._sessions[key] = session
        self._batcher.open_session(key)
        return session

    def set_pruning(self, pruning: Any) -> None:
        """Rollout pruning for the sessions of one rollout (a SessionPruning), or None to stop it."""
        self._batcher.pruning = pruning

    def _finish(self, session: GatewaySession) -> None:
        with self._lock:
            if self._sessions.get(session.key) is session:
                del self._sessions[session.key]
        if self._batcher is not None:
            self._batcher.finish_session(session.key)

    def stats(self) -> dict:
        out = dict(self._batcher.stats()) if self._batcher else {"engine_calls": 0, "rows": 0, "mean_batch_fill": None}
        with self._lock:
            out.update(self._counts)
            out["open_sessions"] = len(self._sessions)
        return out

    # --- HTTP -----------------------------------------------------------------------------------
    def _build_app(self) -> FastAPI:
        app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

        @app.exception_handler(GatewayError)
        async def _gateway_error(request: Request, err: GatewayError) -> JSONResponse:
            return JSONResponse(err.body(), status_code=err.status)

        @app.exception_handler(StarletteHTTPException)
        async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
            error = GatewayError(err.status_code, f"{request.method} {request.url.path}: {err.detail}",
                                 code="not_found" if err.status_code == 404 else None)
            return JSONResponse(error.body(), status_code=err.status_code)

        @app.get("/v1/models")
        async def models(request: Request) -> dict:
            self._authorize(request)
            return self._models()

        @app.get("/v1/models/{model:path}")
        async def model(request: Request, model: str) -> dict:
            self._authorize(request)
            self._check_model(model)
            return self._models()["data"][0]

        @app.post("/v1/chat/completions")
        async def completions(request: Request, response: Response) -> dict:
            self._authorize(request)
            body = await self._serve(request, None)
            if self.chat_warning:
                # an HTTP header is latin-1: a path with other characters is kept readable in the body
                response.headers["X-Reinforge-Warning"] = self.chat_warning.encode("latin-1", "replace").decode("latin-1")
                body["warning"] = self.chat_warning
            return body

        @app.post("/v1/completions")
        async def text_completions(request: Request) -> dict:
            self._authorize(request)
            return await self._serve(request, None, text=True)

        @app.get("/sessions/{key}/v1/models")
        async def session_models(request: Request, key: str) -> dict:
            self._authorize(request)
            self._session(key)
            return self._models()

        @app.post("/sessions/{key}/v1/chat/completions")
        async def session_completions(request: Request, key: str) -> dict:
            self._authorize(request)
            return await self._serve(request, key)

        return app

    def _authorize(self, request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), self.api_key.encode()):
            raise GatewayError(401, "missing or wrong API key: send the gateway's key as 'Authorization: Bearer <key>' "
                                    "(the api_key of the OpenAI client)", type="invalid_request_error",
                               code="invalid_api_key")

    def _models(self) -> dict:
        return ModelList(data=[ModelCard(id=self.model_name, created=0)]).model_dump()

    def _check_model(self, name: str) -> None:
        if name != self.model_name:
            raise GatewayError(404, f"the model {name!r} does not exist; this gateway serves {self.model_name!r}",
                               param="model", code="model_not_found")

    def _session(self, key: str) -> GatewaySession:
        with self._lock:
            session = self._sessions.get(key)
        if session is None:
            raise GatewayError(404, f"unknown session {key!r}: it was never opened or has finished",
                               code="session_not_found")
        return session

    async def _serve(self, request: Request, key: str | None, text: bool = False) -> dict:
        with self._lock:
            self._counts["requests"] += 1
        session = None
        # A session request holds the batcher's quiet-window flush from now until it is queued.
        preparing = self._batcher.preparing() if key is not None else None
        try:
            session = self._session(key) if key is not None else None
            body = await read_body(request, self.max_body_bytes)  # an over-size body: 413 before parsing
            if text:
                return await complete_text(self, await self.offload(_parse_json, body))
            req = await self.offload(lambda: parse_request(_parse_json(body)))
            return await complete_chat(self, req, session, preparing)
        except GatewayError as err:
            self._count_error(session, f"{err.status} {err.code or err.type}: {err.message}")
            raise
        except Exception as err:  # a bug or a failing tokenizer: an OpenAI-style 500, counted, never a hang
            log.exception("gateway: internal error on %s", request.url.path)
            self._count_error(session, f"500 {type(err).__name__}: {err}")
            raise GatewayError(500, f"internal error: {type(err).__name__}: {err}", type="server_error") from err
        finally:
            if preparing is not None:
                preparing.done()

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in a worker thread: work that grows with a request (parsing, rendering,
        tokenizing) never runs on the event loop that serves every client."""
        return await asyncio.get_running_loop().run_in_executor(self._workers, fn, *args)

    def _count_malformed(self, malformed: int) -> None:
        with self._lock:
            self._counts["malformed_tool_calls"] += malformed

    def _count_error(self, session: GatewaySession | None, text: str) -> None:
        with self._lock:
            self._counts["errors"] += 1
            if session is not None:
                session.errors.append(text)


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:  # UnicodeDecodeError included
        raise GatewayError(400, "the request body is not JSON") from None


def _engine_context(engine: Any) -> int | None:
    """The model's context length when the engine exposes its model (TorchEngine does); else None."""
    config = getattr(getattr(engine, "model", None), "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None
