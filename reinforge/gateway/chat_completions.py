"""`/v1/chat/completions`: one chat request, from its parsed body to the OpenAI answer.

The server's one event-loop thread serves every client, so nothing that grows with the request
runs on it: the prompt is rendered and tokenized (`prepare`) in one of the gateway's worker
threads (a 4 MB conversation once blocked every client for 18.8 s), after a bound on its
characters has refused any prompt that cannot fit the context (reinforge.gateway.prompt_bound).
Refusals that need no tokens (unknown model, `n` too large, unsupported options) are answered
before that, at once. A session's recorder is touched under the session's own lock, from worker
threads only, so one session's long request never holds up another session.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jinja2 import TemplateError

from reinforge.engines.base import Generation, SamplingParams
from reinforge.envs.chat_format import ChatFormatError
from reinforge.gateway.batcher import BatcherClosed, EngineFailure, Job, Preparing
from reinforge.gateway.recorder import Plan, Sample
from reinforge.gateway.request_sampling import request_params, token_budget
from reinforge.gateway.tool_calls import RequestTools, parse_completion, template_message, template_tools
from reinforge.gateway.wire import (
    AssistantMessage, ChatCompletion, ChatCompletionRequest, Choice, GatewayError, Message, Usage, check_supported,
)

if TYPE_CHECKING:
    from reinforge.gateway.server import Gateway, GatewaySession

PLAIN_SEED = 0


@dataclass
class Prepared:
    """A request ready to queue: its prompt ids, and what answering it needs."""

    tools: RequestTools
    plan: Plan | None  # a session's recorder plan (None for plain requests)
    prompt: list[int]
    params: SamplingParams
    order: tuple


async def complete_chat(gateway: "Gateway", req: ChatCompletionRequest, session: "GatewaySession | None",
                        preparing: Preparing | None = None) -> dict:
    check_supported(req)
    gateway._check_model(req.model)
    max_n = session.max_n if session is not None else gateway.max_batch
    if req.n > max_n:
        where = f"this session's max_n ({max_n}, the run's group size)" if session else f"max_batch ({max_n})"
        raise GatewayError(400, f"n={req.n} is more than {where}", param="n", code="n_too_large")
    ready = await _prepared(gateway, req, session)
    job = Job(prompt_ids=ready.prompt, n=req.n, params=ready.params, order=ready.order,
              session_key=session.key if session else None,
              seed_base=session.seed if session else (req.seed if req.seed is not None else PLAIN_SEED))
    try:
        queued = gateway._batcher.submit(job)
        if preparing is not None:
            preparing.done()
        generations: list[Generation] = await asyncio.wrap_future(queued)
        choices = [gateway._texts.choice(g, ready.params.stop_token_ids, req.stop_strings()) for g in generations]
        parsed = [parse_completion(c.content, gateway.tool_format, ready.tools, parse_calls=req.tool_choice != "none")
                  for c in choices]
    except BaseException as err:
        if ready.plan is not None:
            await gateway.offload(_release, session, ready.plan)
        if isinstance(err, EngineFailure):
            raise GatewayError(500, f"the engine failed on this request's batch: {err}", type="server_error",
                               code="engine_error") from None
        if isinstance(err, BatcherClosed):
            raise GatewayError(500, f"{err}", type="server_error", code="gateway_closed") from None
        raise

    out_choices, samples, malformed = [], [], 0
    for index, (gen, choice, p) in enumerate(zip(generations, choices, parsed)):
        malformed += bool(p.malformed)
        finish = "tool_calls" if p.tool_calls else choice.finish_reason
        message = AssistantMessage(content=p.content, tool_calls=p.tool_calls or None)
        logprobs = gateway._texts.logprobs(choice) if req.logprobs else None
        out_choices.append(Choice(index=index, message=message, finish_reason=finish, logprobs=logprobs))
        raw = message.model_dump(exclude_none=True)
        samples.append(Sample(
            token_ids=choice.kept_ids, logprobs=choice.logprobs, finish_reason=finish,
            policy_version=gen.policy_version,
            response=template_message(Message.model_validate(raw), gateway.tool_format, ready.tools,
                                      gateway._inline_calls),
            response_raw=raw,
        ))
    gateway._count_malformed(malformed)
    if session is not None:
        await gateway.offload(_record, session, ready.plan, samples, malformed)
    prompt_tokens = len(ready.prompt)
    completion_tokens = sum(len(c.kept_ids) for c in choices)
    return ChatCompletion(
        id="chatcmpl-" + uuid.uuid4().hex, created=int(time.time()), model=gateway.model_name, choices=out_choices,
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                    total_tokens=prompt_tokens + completion_tokens),
    ).model_dump()  # nulls kept, as OpenAI writes them ("content": null beside tool_calls)


async def _prepared(gateway: "Gateway", req: ChatCompletionRequest, session: "GatewaySession | None") -> Prepared:
    """`prepare` in a worker thread. A request abandoned meanwhile (the server shutting down) still
    finishes preparing there; its plan is then handed back, so its join point is not held forever."""
    future = gateway._workers.submit(prepare, gateway, req, session)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if session is not None:
            future.add_done_callback(lambda done: _release_abandoned(session, done))
        raise


def _release_abandoned(session: "GatewaySession", done) -> None:
    if not done.cancelled() and done.exception() is None and done.result().plan is not None:
        _release(session, done.result().plan)


def prepare(gateway: "Gateway", req: ChatCompletionRequest, session: "GatewaySession | None") -> Prepared:
    """The request's prompt ids and sampling settings (a worker thread runs this)."""
    tools = RequestTools(req.tools)
    schemas = template_tools(req.tools)
    messages = [template_message(m, gateway.tool_format, tools, gateway._inline_calls) for m in req.messages]
    if session is None:
        prompt = _plain_prompt(gateway, messages, schemas)
        budget = token_budget(req, gateway.max_new_tokens, None, gateway.max_context_tokens, len(prompt))
        params, _ = request_params(req, None, budget, gateway._stop_ids)
        return Prepared(tools, None, prompt, params, (float("inf"), time.monotonic()))
    raw_messages = [m.model_dump(exclude_none=True) for m in req.messages]
    with session.lock:
        if session.calls >= session.max_calls:
            raise GatewayError(400, f"this episode may make at most {session.max_calls} model calls "
                                    f"(max_calls); call {session.calls + 1} was refused", code="max_calls_exceeded")
        try:
            plan = session.recorder.plan(messages, schemas, raw_messages, gateway.prompt_bound.check)
        except (TemplateError, ChatFormatError) as err:
            raise _template_error(err) from None
        try:
            budget = token_budget(req, gateway.max_new_tokens, session.sampling.max_new_tokens,
                                  gateway.max_context_tokens, len(plan.prompt_ids))
        except BaseException:
            session.recorder.release(plan)
            raise
        session.calls += 1
        params, overridden = request_params(req, session.sampling, budget, gateway._stop_ids)
        session.overridden_params += overridden
        return Prepared(tools, plan, plan.prompt_ids, params, (session.order, session.calls))


def _plain_prompt(gateway: "Gateway", messages: list[dict], schemas: list[dict] | None) -> list[int]:
    try:
        chat = gateway._plain.chat(schemas)
        rendered = chat.render(messages, add_generation_prompt=True)
        gateway.prompt_bound.check(rendered)
        return chat.encode(rendered)
    except (TemplateError, ChatFormatError) as err:
        raise _template_error(err) from None


def _template_error(err: Exception) -> GatewayError:
    return GatewayError(400, f"the chat template cannot render these messages: {err}", param="messages",
                        code="template_error")


def _release(session: "GatewaySession", plan: Plan) -> None:
    with session.lock:
        session.recorder.release(plan)


def _record(session: "GatewaySession", plan: Plan, samples: list[Sample], malformed: int) -> None:
    with session.lock:
        session.malformed_tool_calls += malformed
        session.recorder.record(plan, samples)
