"""Generative judges: an LLM answers strict YES/NO (or A/B) questions about a response.

`RubricJudge` is a RewardFn: each rubric item is one binary check; the judge is asked, item by
item, whether the response satisfies it, and the reward is the weighted fraction of YES.

The judge is any OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp server, OpenAI...),
called with the official `openai` client, or any `chat(messages) -> str` callable. A local
reinforge engine serves as a judge through `engine_chat`:

    chat = engine_chat(TorchEngine(judge_model, ...), judge_tokenizer)
    reward = RubricJudge(["The answer is a number", "The response is polite"], chat=chat)

For vLLM: `vllm serve <model> --served-model-name judge`, then
`RubricJudge(rubric, base_url="http://127.0.0.1:8000/v1")` (the default model name is "judge").

Fail fast, never silently zero: a judge answer that is not a clear verdict raises
`JudgeOutputError`, an endpoint that does not answer within `timeout_s` raises the client's
timeout error (`openai.APITimeoutError`); the scorer records either on the trajectory and counts
it. `timeout_s` bounds each request; a rubric of k items makes up to k sequential requests, so
keep `reward.timeout_s` above k * timeout_s. A `chat` callable carries no timeout of its own:
the scorer's timeout is then the only bound.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Prompt, Task

Chat = Callable[[list[dict[str, str]]], str]

DEFAULT_JUDGE_MODEL = "judge"

RUBRIC_SYSTEM = (
    "You are a strict grader. You are shown a task, a response to it and one criterion. "
    "Decide whether the response satisfies the criterion. Answer with exactly one word, YES or NO, "
    "optionally wrapped in <verdict></verdict> tags, and nothing else."
)

PAIRWISE_SYSTEM = (
    "You are a strict grader. You are shown a task and two responses to it, A and B. "
    "Decide which response is better. Answer with exactly one letter, A or B, "
    "optionally wrapped in <verdict></verdict> tags, and nothing else."
)

# Reasoning judges may think first; the verdict is what follows the thinking.
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_VERDICT = re.compile(r"^\s*<verdict>(.*?)</verdict>", re.DOTALL | re.IGNORECASE)
_TRAILING_PUNCTUATION = ".,;:!"


class JudgeOutputError(ValueError):
    """The judge answered something that is not a verdict: an error, never a silent zero."""


def _first_word(text: str, allowed: tuple[str, ...]) -> str:
    """The first word of `text` (after an optional <think> block, inside optional <verdict> tags),
    upper-cased, which must be one of `allowed`; anything else raises JudgeOutputError."""
    body = _THINK.sub("", text, count=1)
    tagged = _VERDICT.match(body)
    if tagged:
        body = tagged.group(1)
    elif re.match(r"^\s*<verdict>", body, re.IGNORECASE):
        raise JudgeOutputError(f"judge output has an unclosed <verdict> tag: {text[:200]!r}")
    words = body.split()
    word = words[0].rstrip(_TRAILING_PUNCTUATION).upper() if words else ""
    if word not in allowed:
        raise JudgeOutputError(f"judge output is not one of {'/'.join(allowed)}: {text[:200]!r}")
    return word


def parse_yes_no(text: str) -> bool:
    """True for YES, False for NO: the first word, case-insensitive, trailing punctuation ignored,
    optionally in `<verdict>` tags. "YES/NO", "Maybe", "" or an unclosed tag raise JudgeOutputError."""
    return _first_word(text, ("YES", "NO")) == "YES"


def parse_a_b(text: str) -> str:
    """"A" or "B", with the same strict rules as `parse_yes_no`."""
    return _first_word(text, ("A", "B"))


def render_prompt(prompt: Prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in prompt)


def parse_rubric(rubric: list[str] | str) -> list[str]:
    """A list of checks, or a string with one check per line (blank lines and "- " bullets ignored)."""
    lines = rubric.splitlines() if isinstance(rubric, str) else list(rubric)
    items = []
    for line in lines:
        if not isinstance(line, str):
            raise ValueError(f"rubric items must be strings, got {line!r}")
        item = line.strip()
        if item[:2] in ("- ", "* "):
            item = item[2:].strip()
        if item:
            items.append(item)
    if not items:
        raise ValueError("rubric judge: the rubric has no items")
    return items


class OpenAIChat:
    """`chat(messages) -> str` over an OpenAI-compatible endpoint, greedy, one bounded request.

    The client is created on first use (so the object pickles, e.g. to a Ray reward worker) and
    never retries: a slow judge is a timeout error, not a silent multiple of the timeout.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str = DEFAULT_JUDGE_MODEL,
        api_key: str = "EMPTY",
        timeout_s: float = 30.0,
        max_tokens: int | None = 64,
        client: Any = None,
    ):
        if not timeout_s > 0:
            raise ValueError(f"judge timeout_s must be positive, got {timeout_s}")
        self.base_url, self.model, self.api_key = base_url, model, api_key
        self.timeout_s, self.max_tokens = float(timeout_s), max_tokens
        self._client = client
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_lock"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                from openai import OpenAI  # only runs that use a judge need the client

                self._client = OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s, max_retries=0)
            return self._client

    def __call__(self, messages: list[dict[str, str]]) -> str:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0.0}
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        completion = self.client.chat.completions.create(**kwargs)
        if not completion.choices:
            raise JudgeOutputError("judge returned no choices")
        content = completion.choices[0].message.content
        if content is None:
            raise JudgeOutputError("judge returned a message without text content")
        return content


def _make_chat(chat: Chat | None, base_url: str | None, model: str, api_key: str, timeout_s: float, max_tokens: int | None, client: Any) -> Chat:
    if chat is not None:
        if base_url is not None or client is not None:
            raise ValueError("judge: give either `chat` or an endpoint (`base_url` / `client`), not both")
        return chat
    return OpenAIChat(base_url=base_url, model=model, api_key=api_key, timeout_s=timeout_s, max_tokens=max_tokens, client=client)


class RubricJudge:
    """Reward = sum of weights of the rubric items the judge answers YES to / sum of all weights.

    One judge request per item, so each verdict is a single binary check (more reliable than
    asking for a score out of 10). Raises JudgeOutputError on any unparseable verdict.
    """

    def __init__(
        self,
        rubric: list[str] | str,
        weights: list[float] | None = None,
        base_url: str | None = None,
        model: str = DEFAULT_JUDGE_MODEL,
        api_key: str = "EMPTY",
        timeout_s: float = 30.0,
        client: Any = None,
        chat: Chat | None = None,
        max_tokens: int | None = 64,
    ):
        self.items = parse_rubric(rubric)
        if weights is None:
            weights = [1.0] * len(self.items)
        weights = [float(w) for w in weights]
        if len(weights) != len(self.items):
            raise ValueError(f"rubric judge: {len(weights)} weights for {len(self.items)} rubric items")
        if any(not w >= 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"rubric judge: weights must be >= 0 with a positive sum, got {weights}")
        self.weights = weights
        self.chat = _make_chat(chat, base_url, model, api_key, timeout_s, max_tokens, client)

    def messages(self, task: Task, response: str, item: str) -> list[dict[str, str]]:
        user = (
            f"<task>\n{render_prompt(task.prompt)}\n</task>\n\n<response>\n{response}\n</response>\n\n"
            f"<criterion>\n{item}\n</criterion>\n\nDoes the response satisfy the criterion? Answer YES or NO."
        )
        return [{"role": "system", "content": RUBRIC_SYSTEM}, {"role": "user", "content": user}]

    def verdicts(self, task: Task, response: str) -> list[bool]:
        return [parse_yes_no(self.chat(self.messages(task, response, item))) for item in self.items]

    def __call__(self, task: Task, trajectory: Trajectory) -> float:
        verdicts = self.verdicts(task, trajectory.response_text)
        return sum(w for w, yes in zip(self.weights, verdicts) if yes) / sum(self.weights)


class PairwiseJudge:
    """A pairwise comparator `(task, a, b) -> bool` (True when a is better) for the group rewards
    `PairwisePreference` and `Tournament`, asking the judge "A or B?"; same endpoint options as
    RubricJudge, same strict parsing."""

    def __init__(
        self,
        base_url: str | None = None,
        model: str = DEFAULT_JUDGE_MODEL,
        api_key: str = "EMPTY",
        timeout_s: float = 30.0,
        client: Any = None,
        chat: Chat | None = None,
        max_tokens: int | None = 64,
        instructions: str = "",
    ):
        self.instructions = instructions
        self.chat = _make_chat(chat, base_url, model, api_key, timeout_s, max_tokens, client)

    def messages(self, task: Task, a: str, b: str) -> list[dict[str, str]]:
        extra = f"Judge by: {self.instructions}\n\n" if self.instructions else ""
        user = (
            f"<task>\n{render_prompt(task.prompt)}\n</task>\n\n<response_A>\n{a}\n</response_A>\n\n"
            f"<response_B>\n{b}\n</response_B>\n\n{extra}Which response is better? Answer A or B."
        )
        return [{"role": "system", "content": PAIRWISE_SYSTEM}, {"role": "user", "content": user}]

    def __call__(self, task: Task, a: str, b: str) -> bool:
        return parse_a_b(self.chat(self.messages(task, a, b))) == "A"


def engine_chat(engine: Any, tokenizer: Any, params: Any = None, seed: int = 0) -> Chat:
    """A `chat(messages) -> str` served by a local reinforge Engine (greedy by default).

    The messages are rendered with the tokenizer's chat template (so it needs one); calls are
    serialized because an engine is not meant to be driven by several scorer threads at once.
    """
    from reinforge.engines.base import SamplingParams
    from reinforge.envs.control_tokens import ControlTokens

    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("engine_chat: the judge tokenizer has no chat template")
    if params is None:
        eos = getattr(tokenizer, "eos_token_id", None)
        params = SamplingParams(max_new_tokens=64, temperature=0.0, stop_token_ids=(eos,) if eos is not None else ())
    lock = threading.Lock()
    controls = ControlTokens(tokenizer)

    def chat(messages: list[dict[str, str]]) -> str:
        # The judged responses are the policy's text: a special token in them stays text, so a
        # response cannot forge a turn (an "assistant: A" verdict) in the judge's conversation.
        text = tokenizer.apply_chat_template(controls.mark(messages), add_generation_prompt=True, tokenize=False)
        ids = controls.encode(text)
        with lock:
            generation = engine.generate([ids], params, seed=seed)[0]
        return tokenizer.decode(generation.token_ids, skip_special_tokens=True)

    return chat
