"""What one chat-completion request may sample: its token budget and its sampling settings.

On a session (an episode being recorded for training) the run's SamplingParams win over the
request's temperature / top_p / top_k, since the learner's log-probs assume the run's settings;
each differing value the request asked for is counted as an override. Plain requests (the
gateway serving a model outside training) use the request's own settings.
"""

from __future__ import annotations

from reinforge.engines.base import SamplingParams
from reinforge.gateway.wire import ChatCompletionRequest, GatewayError


def token_budget(req: ChatCompletionRequest, max_new_tokens: int, session_max_new_tokens: int | None,
                 max_context_tokens: int | None, prompt_length: int) -> int:
    """New tokens this request may sample: its max_tokens, capped by the gateway, the session and the context."""
    budget = min(req.requested_max_tokens() or max_new_tokens, max_new_tokens)
    if session_max_new_tokens is not None:
        budget = min(budget, session_max_new_tokens)
    if max_context_tokens is not None:
        room = max_context_tokens - prompt_length
        if room < 1:
            raise GatewayError(400, f"the prompt is {prompt_length} tokens; this model's context is "
                                    f"{max_context_tokens} tokens, which leaves no room for a completion",
                               param="messages", code="context_length_exceeded")
        budget = min(budget, room)
    return budget


def request_params(req: ChatCompletionRequest, run: SamplingParams | None, budget: int,
                   stop_ids: tuple[int, ...]) -> tuple[SamplingParams, int]:
    """(the SamplingParams to sample with, how many of the request's settings the run overrode)."""
    if run is None:
        return SamplingParams(max_new_tokens=budget,
                              temperature=1.0 if req.temperature is None else req.temperature,
                              top_p=1.0 if req.top_p is None else req.top_p,
                              top_k=0 if req.top_k is None else req.top_k, stop_token_ids=stop_ids), 0
    overridden = sum(asked is not None and asked != used for asked, used in (
        (req.temperature, run.temperature), (req.top_p, run.top_p), (req.top_k, run.top_k)))
    stops = tuple(dict.fromkeys([*run.stop_token_ids, *stop_ids]))
    return SamplingParams(max_new_tokens=budget, temperature=run.temperature, top_p=run.top_p, top_k=run.top_k,
                          stop_token_ids=stops), overridden
