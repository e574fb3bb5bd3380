"""Token-exact trajectories of one agent episode, from the requests it sends (pure: no HTTP).

An agent talks to the model in messages; training needs the exact token ids that were sampled
and their behaviour log-probs. The recorder keeps, per session, every completion as a node
(prompt ids, sampled ids, log-probs, the request's messages and tools, the message returned)
and lays the calls out in chains of tokens. A new request with messages M and tools T JOINS the
chain whose last call is X when:

1. M extends X's request messages + X's response message (compared normalized: role, text
   content (None == "", text parts joined), tool calls by name and parsed arguments,
   tool_call_id; other keys ignored), T equals X's tools, and no request has joined X yet; and
2. the template does not rewrite history: `render(M[:k])` (k = the messages through X's
   assistant message, without a generation prompt) is a prefix of `render(M)` (with one).

The new prompt is then X's chain, token for token, + the observation: the rendered text after
X's end-of-turn token (the tool results, the agent's next user message, the next generation
prompt), tokenized once, masked from the loss. When X's sample did not end with the end-of-turn
token (cut by max_tokens or a stop string), the template's turn-closing text is part of the
observation (it was not sampled, so it is not trained). Sampled tokens are never re-tokenized
from text, which is what keeps the learner's log-probs equal to the engine's.

Otherwise (the agent edited, dropped or summarized history, changed its tools, or the template
renders an earlier turn differently once more messages follow, as Qwen3 drops past thinking)
the request starts a new chain from its own full render, and that SPLIT is counted (the
session's first chain is not a split). An episode is then several trajectory parts that share
its reward. For an n>1 request, choice 0 continues the chain and choices 1..n-1 start BRANCH
chains whose prompt is the whole sequence so far (not trained); an agent may continue any of them
by sending its message back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from transformers import PreTrainedTokenizerBase

from reinforge.envs.chat_format import ChatFormat


@dataclass
class TrajectoryPart:
    """One token-exact chain of calls of an episode (see the module docstring)."""

    token_ids: list[int]  # the chain's whole sequence: prompt, sampled turns, observations
    loss_mask: list[bool]  # True only on tokens the engine sampled
    logprobs: list[float]  # behaviour log-probs on sampled tokens, 0.0 elsewhere
    turn_spans: list[tuple[int, int]]  # [start, end) of each sampled turn
    prompt_length: int  # tokens before the chain's first sampled token
    finish_reason: str  # the last call's: "stop" | "length" ("tool_calls" is reported as "stop")
    policy_version: int  # oldest version that sampled any of its tokens
    messages: list[dict]  # the OpenAI messages of the chain's last request + the last response
    starts_with_split: bool  # this chain began because history was not append-only
    branch: bool  # this chain began as choice 1..n-1 of an n>1 request
    calls: int  # model calls in this chain


@dataclass
class Sample:
    """One sampled choice, as the server hands it to the recorder."""

    token_ids: list[int]  # the kept sampled ids (cut after the token that completes a stop string)
    logprobs: list[float]
    finish_reason: str  # "stop" | "length" | "tool_calls"
    policy_version: int
    response: dict  # the returned message in template form (tool_calls.template_message)
    response_raw: dict  # the returned message as the agent received it


@dataclass
class _Chain:
    token_ids: list[int]
    loss_mask: list[bool]
    logprobs: list[float]
    prompt_length: int
    starts_with_split: bool
    branch: bool
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    finish_reason: str = "stop"
    policy_version: int | None = None
    messages: list[dict] = field(default_factory=list)
    calls: int = 0

    def append(self, ids: list[int], trained: bool, logprobs: list[float] | None = None) -> None:
        self.token_ids += ids
        self.loss_mask += [trained] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)

    def part(self) -> TrajectoryPart:
        return TrajectoryPart(
            token_ids=list(self.token_ids), loss_mask=list(self.loss_mask), logprobs=list(self.logprobs),
            turn_spans=list(self.turn_spans), prompt_length=self.prompt_length,
            finish_reason="stop" if self.finish_reason == "tool_calls" else self.finish_reason,
            policy_version=self.policy_version or 0, messages=[dict(m) for m in self.messages],
            starts_with_split=self.starts_with_split, branch=self.branch, calls=self.calls,
        )


@dataclass
class _Node:
    """The last call of a chain: what a following request must extend to join it."""

    chain: _Chain
    history: list[Any]  # normalized request messages + normalized response message
    tools_key: str
    ended_turn: bool  # the sample ends with the template's end-of-turn token
    order: int
    rendered: str  # the template's text of its request (generation prompt included), rendered once
    claimed: bool = False  # a request has joined (or is joining) this call


@dataclass
class Plan:
    """What one request's prompt is, before sampling; hand it back to `record` or `release`."""

    prompt_ids: list[int]
    join: _Node | None
    observation_ids: list[int]
    split: bool
    split_reason: str | None
    messages: list[dict]  # template form
    raw_messages: list[dict]
    tools_key: str
    rendered: str  # render(messages, add_generation_prompt=True): the next join reuses it


def normalize(message: dict) -> Any:
    """The parts of a template-form message that decide whether history is unchanged."""
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return json.dumps([message.get("role"), message.get("content") or "", calls, message.get("tool_call_id")],
                      sort_keys=True, ensure_ascii=False)


class EpisodeRecorder:
    """Join / split / branch bookkeeping of one session (see the module docstring)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase):
        self.tokenizer = tokenizer
        self._formats: dict[str, ChatFormat] = {}
        self._chains: list[_Chain] = []
        self._tails: list[_Node] = []
        self._new_chains_planned = 0
        self._order = 0
        self.splits = 0
        self.splits_by_reason: dict[str, int] = {}
        self.branches = 0

    def chat(self, tools: list[dict] | None) -> ChatFormat:
        """The ChatFormat for a request's tools (cached: the same tools render the same)."""
        key = _tools_key(tools)
        if key not in self._formats:
            self._formats[key] = ChatFormat(self.tokenizer, tools=tools)
        return self._formats[key]

    def plan(self, messages: list[dict], tools: list[dict] | None, raw_messages: list[dict] | None = None,
             before_encoding: Callable[[str, int], None] | None = None) -> Plan:
        """The prompt of a request: a join onto an earlier call's chain, or a new chain.
        `before_encoding(text, tokens_before_it)` sees the text about to be tokenized (it may raise
        to refuse the request before that costs anything)."""
        before_encoding = before_encoding or (lambda text, tokens: None)
        chat, key = self.chat(tools), _tools_key(tools)
        full = chat.render(messages, add_generation_prompt=True)
        wanted = [normalize(m) for m in messages]
        rewritten = False
        # The longest matching history is the most specific; on a tie the older chain (choice 0
        # before its branches) wins.
        for node in sorted(self._tails, key=lambda n: (-len(n.history), n.order)):
            k = len(node.history)
            if node.claimed or node.tools_key != key or len(messages) <= k or wanted[:k] != node.history:
                continue
            closed = chat.render(messages[:k], add_generation_prompt=False)
            if not full.startswith(closed):
                rewritten = True
                continue
            after_close = _end_of_last_turn(chat, node.rendered, closed)
            if after_close is None:
                rewritten = True
                continue
            start = after_close if node.ended_turn else after_close - len(chat.turn_close)
            before_encoding(full[start:], len(node.chain.token_ids))
            observation = chat.encode(full[start:])
            node.claimed = True
            return Plan(node.chain.token_ids + observation, node, observation, False, None, messages,
                        raw_messages or [], key, full)
        before_encoding(full, 0)
        prompt = chat.encode(full)
        split = bool(self._chains) or self._new_chains_planned > 0
        self._new_chains_planned += 1
        reason = ("template_rewrites_history" if rewritten else "history_not_append_only") if split else None
        return Plan(prompt, None, [], split, reason, messages, raw_messages or [], key, full)

    def release(self, plan: Plan) -> None:
        """A planned request that was not sampled (an error): its join point is free again."""
        if plan.join is not None:
            plan.join.claimed = False
        else:
            self._new_chains_planned -= 1

    def record(self, plan: Plan, samples: list[Sample]) -> None:
        """The sampled choices of a planned request: choice 0 continues, the others branch."""
        if not samples:
            raise ValueError("record needs at least one sampled choice")
        if plan.join is not None:
            chain = plan.join.chain
            self._tails.remove(plan.join)
            chain.append(plan.observation_ids, trained=False)
        else:
            self._new_chains_planned -= 1
            if plan.split:
                self.splits += 1
                self.splits_by_reason[plan.split_reason] = self.splits_by_reason.get(plan.split_reason, 0) + 1
            chain = self._new_chain(plan.prompt_ids, split=plan.split, branch=False)
        if chain.token_ids != plan.prompt_ids:  # cannot happen while a planned join point stays claimed
            raise RuntimeError("the chain changed between plan and record; its tokens would not be the ones sampled from")
        for index, sample in enumerate(samples):
            if index > 0:
                self.branches += 1
                chain = self._new_chain(plan.prompt_ids, split=False, branch=True)
            self._add_turn(chain, plan, sample)

    def parts(self) -> list[TrajectoryPart]:
        return [chain.part() for chain in self._chains]

    def _new_chain(self, prompt_ids: list[int], split: bool, branch: bool) -> _Chain:
        chain = _Chain(list(prompt_ids), [False] * len(prompt_ids), [0.0] * len(prompt_ids), len(prompt_ids),
                       starts_with_split=split, branch=branch)
        self._chains.append(chain)
        return chain

    def _add_turn(self, chain: _Chain, plan: Plan, sample: Sample) -> None:
        if len(sample.token_ids) != len(sample.logprobs) or not sample.token_ids:
            raise ValueError("a sample needs one log-prob per sampled token, and at least one token")
        start = len(chain.token_ids)
        chain.append(list(sample.token_ids), trained=True, logprobs=list(sample.logprobs))
        chain.turn_spans.append((start, len(chain.token_ids)))
        chain.finish_reason = sample.finish_reason
        versions = [v for v in (chain.policy_version, sample.policy_version) if v is not None]
        chain.policy_version = min(versions)
        chain.messages = [*plan.raw_messages, sample.response_raw]
        chain.calls += 1
        history = [normalize(m) for m in plan.messages] + [normalize(sample.response)]
        end_of_turn = self.chat(None).end_of_turn_id
        self._order += 1
        self._tails.append(_Node(chain, history, plan.tools_key, sample.token_ids[-1] == end_of_turn, self._order,
                                 plan.rendered))


def _tools_key(tools: list[dict] | None) -> str:
    return json.dumps(tools or None, sort_keys=True, ensure_ascii=False)


def _end_of_last_turn(chat: ChatFormat, opened: str, closed: str) -> int | None:
    """Index in `closed` (= render(messages[:k])) just after the end-of-turn token that closes the
    assistant message messages[k-1]: the first one after that turn's generation prompt. `opened` is
    the earlier request's own render (render(messages[:k-1]) with the generation prompt), kept from
    when it was planned rather than rendered again."""
    at = chat.find_turn_close(closed, len(opened)) if closed.startswith(opened) else chat.find_turn_close(closed, last=True)
    return None if at < 0 else at + len(chat.turn_close)
