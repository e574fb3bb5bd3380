"""The OpenAI wire format the gateway speaks: request, response and error bodies of
`/v1/chat/completions` and `/v1/models`, as pydantic models.

Requests ignore fields they do not know (agents and frameworks send many: `user`, `metadata`,
`parallel_tool_calls`, `response_format`...). What the gateway cannot honour is refused with a
400 naming the field, never silently dropped: `stream=true`, `tool_choice` "required" or a named
function (sampling cannot be constrained to a call), `top_logprobs` > 0 (the engine returns only
the sampled token's log-prob), content parts other than text.

Errors are OpenAI-shaped, `{"error": {"message", "type", "param", "code"}}`, with the HTTP status
the `openai` client maps to its exception classes (400 BadRequestError, 401 AuthenticationError,
404 NotFoundError, 500 InternalServerError).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

ROLES = ("system", "developer", "user", "assistant", "tool")


class GatewayError(Exception):
    """A request the gateway answers with an OpenAI-style error body (and HTTP `status`)."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return ErrorBody(error=ErrorDetail(message=self.message, type=self.type, param=self.param,
                                           code=self.code)).model_dump()


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class FunctionCall(_Lenient):
    name: str
    arguments: str = "{}"  # a JSON object, as a string (the OpenAI convention)


class ToolCallOut(_Lenient):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(_Lenient):
    type: str
    text: str | None = None


class Message(_Lenient):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallOut] | None = None
    tool_call_id: str | None = None

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
        return role

    def text(self) -> str:
        """The content as one string: None is "", text parts are joined; other parts are refused."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        texts = []
        for part in self.content:
            if part.type != "text" or part.text is None:
                raise GatewayError(400, f"content part of type {part.type!r} is not supported; the gateway "
                                        "serves text models: send text parts only", param="messages")
            texts.append(part.text)
        return "".join(texts)


class FunctionSpec(_Lenient):
    name: str
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolSpec(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionSpec


class ChatCompletionRequest(_Lenient):
    model: str
    messages: list[Message] = Field(min_length=1)
    tools: list[ToolSpec] | None = None
    tool_choice: str | dict | None = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)  # not OpenAI's; vLLM and others accept it
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0)
    seed: int | None = None
    stream: bool | None = None

    def stop_strings(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return [s for s in stops if s]

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


def parse_request(body: Any) -> ChatCompletionRequest:
    """The request, or a 400 naming the first bad field."""
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or None
        raise GatewayError(400, f"invalid request: {where}: {first['msg']}", param=where) from None


def check_supported(request: ChatCompletionRequest) -> None:
    """Refuse what the gateway cannot do honestly (400 naming the field)."""
    if request.stream:
        raise GatewayError(400, "stream=true is not supported by this gateway; send stream=false (the default)",
                           param="stream", code="unsupported_parameter")
    choice = request.tool_choice
    if choice is not None and choice not in ("auto", "none"):
        raise GatewayError(400, f"tool_choice={json.dumps(choice)} is not supported: sampling cannot be constrained "
                                "to a tool call; use \"auto\" (or \"none\")", param="tool_choice",
                           code="unsupported_parameter")
    if request.top_logprobs:
        raise GatewayError(400, "top_logprobs > 0 is not supported: the engine returns only the sampled token's "
                                "log-prob; send logprobs=true with top_logprobs=0", param="top_logprobs",
                           code="unsupported_parameter")


# --- responses ------------------------------------------------------------------------------------

class TokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: str
    logprobs: ChoiceLogprobs | None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "reinforge"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail
