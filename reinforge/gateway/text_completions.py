"""`/v1/completions`: OpenAI text completions, the format a model trained on raw prompts knows.

A model trained with `rollout.prompt_format=raw` (the default recipe) saw each prompt as plain text,
`tokenizer(prompt).input_ids` (with the tokenizer's own special tokens, e.g. <bos>), and ended its
answer with end-of-sequence (reinforge.envs.single_turn). Through the chat template it sees a format
it never learned, and answers something else ("12+34=" -> "6"). Here the prompt is encoded exactly as
that raw format does, sampled by the same engine through the same batcher as chat requests, and the
answer stops at end-of-sequence (or a `stop` string); no chat template is applied. A prompt may also
be given as token ids, which are sampled from as they are.

The request follows OpenAI's legacy completions API: `prompt` is a string, a list of strings, a list
of token ids or a list of such lists; each gets `n` choices, indexed prompt by prompt. `max_tokens`
defaults to the gateway's cap (as for chat; OpenAI's own default is 16). `logprobs=0` returns the
sampled tokens' log-probs; what cannot be honoured (`logprobs` > 0, `echo`, `suffix`, `best_of` > n,
`stream`) is refused with a 400 naming the field. Plain endpoint only: a session records chat
episodes for training, so there is no text completion under `/sessions/<key>/v1`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from reinforge.engines.base import Generation
from reinforge.gateway.batcher import BatcherClosed, EngineFailure, Job
from reinforge.gateway.request_sampling import request_params, token_budget
from reinforge.gateway.wire import GatewayError, Usage, _Lenient

if TYPE_CHECKING:
    from reinforge.gateway.server import Gateway


class CompletionRequest(_Lenient):
    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)  # not OpenAI's; vLLM and others accept it
    max_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1)
    logprobs: int | None = Field(default=None, ge=0)
    seed: int | None = None
    stream: bool | None = None
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stops if s]

    def requested_max_tokens(self) -> int | None:
        return self.max_tokens

    def prompts(self) -> list[str | list[int]]:
        """One entry per prompt: its text, or its token ids."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if prompt and all(isinstance(p, int) for p in prompt):
            return [list(prompt)]
        return list(prompt)


class TextLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: None = None
    text_offset: list[int]


class TextChoice(BaseModel):
    text: str
    index: int
    logprobs: TextLogprobs | None = None
    finish_reason: str


class TextCompletion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[TextChoice]
    usage: Usage


def parse_completion_request(body: Any) -> CompletionRequest:
    """The request, or a 400 naming the first bad field."""
    try:
        return CompletionRequest.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        where = str(first["loc"][0]) if first["loc"] else None  # the field (a union's branch names follow it)
        raise GatewayError(400, f"invalid request: {where}: {first['msg']}", param=where) from None


def check_supported_text(req: CompletionRequest) -> None:
    """Refuse what the endpoint cannot do honestly (400 naming the field)."""
    refusals = [
        (req.stream, "stream", "stream=true is not supported by this gateway; send stream=false (the default)"),
        (req.echo, "echo", "echo=true is not supported: the response holds the sampled text only"),
        (req.suffix, "suffix", "suffix (insertion) is not supported: the model continues the prompt"),
        (req.logprobs, "logprobs", "logprobs > 0 is not supported: the engine returns only the sampled token's "
                                   "log-prob; send logprobs=0"),
        (req.best_of is not None and req.best_of != req.n, "best_of",
         "best_of other than n is not supported: every sampled choice is returned"),
    ]
    for refused, param, message in refusals:
        if refused:
            raise GatewayError(400, message, param=param, code="unsupported_parameter")


def prompt_ids(gateway: "Gateway", prompt: str | list[int]) -> list[int]:
    """Token ids as the raw prompt format encodes the text (reinforge.envs.single_turn), or as given."""
    if isinstance(prompt, str):
        gateway.prompt_bound.check(prompt)
        ids = gateway.tokenizer(prompt).input_ids
    else:
        size = len(gateway.tokenizer)
        bad = next((i for i in prompt if not 0 <= i < size), None)
        if bad is not None:
            raise GatewayError(400, f"prompt token id {bad} is outside the vocabulary (0..{size - 1})", param="prompt")
        ids = prompt
    if not ids:
        raise GatewayError(400, "the prompt is empty (no tokens): send some text", param="prompt")
    return ids


async def complete_text(gateway: "Gateway", body: Any) -> dict:
    """Answer one `/v1/completions` request body (see the module docstring)."""
    req = await gateway.offload(parse_completion_request, body)
    check_supported_text(req)
    gateway._check_model(req.model)
    texts = req.prompts()
    if not texts:
        raise GatewayError(400, "prompt is an empty list: send at least one prompt", param="prompt")
    if req.n * len(texts) > gateway.max_batch:
        raise GatewayError(400, f"{len(texts)} prompts x n={req.n} is more than max_batch ({gateway.max_batch})",
                           param="n", code="n_too_large")
    # tokenized in a worker thread: a long prompt does not hold up the clients the event loop serves
    prompts = await gateway.offload(lambda: [prompt_ids(gateway, p) for p in texts])
    stop_ids = () if gateway.tokenizer.eos_token_id is None else (gateway.tokenizer.eos_token_id,)
    jobs = []
    for ids in prompts:
        budget = token_budget(req, gateway.max_new_tokens, None, gateway.max_context_tokens, len(ids))
        params, _ = request_params(req, None, budget, stop_ids)
        jobs.append(Job(prompt_ids=ids, n=req.n, params=params, order=(float("inf"), time.monotonic()),
                        session_key=None, seed_base=req.seed if req.seed is not None else 0))
    try:
        results: list[list[Generation]] = await asyncio.gather(
            *(asyncio.wrap_future(gateway._batcher.submit(job)) for job in jobs))
    except EngineFailure as err:
        raise GatewayError(500, f"the engine failed on this request's batch: {err}", type="server_error",
                           code="engine_error") from None
    except BatcherClosed as err:
        raise GatewayError(500, f"{err}", type="server_error", code="gateway_closed") from None
    choices, completion_tokens = [], 0
    for generations in results:
        for generation in generations:
            sampled = gateway._texts.choice(generation, stop_ids, req.stop_strings())
            completion_tokens += len(sampled.kept_ids)
            logprobs = text_logprobs(gateway, sampled.content_ids, sampled.logprobs) if req.logprobs == 0 else None
            choices.append(TextChoice(text=sampled.content, index=len(choices), logprobs=logprobs,
                                      finish_reason=sampled.finish_reason))
    prompt_tokens = sum(len(ids) * req.n for ids in prompts)
    return TextCompletion(
        id="cmpl-" + uuid.uuid4().hex, created=int(time.time()), model=gateway.model_name, choices=choices,
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                    total_tokens=prompt_tokens + completion_tokens),
    ).model_dump()


def text_logprobs(gateway: "Gateway", ids: list[int], logprobs: list[float]) -> TextLogprobs:
    """The legacy logprobs object: each content token, its behaviour log-prob, its offset in the text."""
    tokens, offsets = [], []
    for end, token_id in enumerate(ids, start=1):
        offsets.append(len(gateway._texts.decode(ids[: end - 1])))
        tokens.append(gateway._texts.token_bytes(token_id).decode("utf-8", errors="replace"))
    return TextLogprobs(tokens=tokens, token_logprobs=list(logprobs[: len(ids)]), text_offset=offsets)
