"""Environments of the `verifiers` package (classic API), named by import path in `env.type`.

Supported: verifiers >= 0.2, < 0.4 (the classic `vf.Environment` API: `SingleTurnEnv`,
`MultiTurnEnv` and subclasses with `env_response`, rubrics of reward functions), installed with
`pip install 'reinforge[verifiers]'`; tested with 0.2.1 and 0.3.1. verifiers 0.4 replaced that API (harnesses
that call a model server themselves) and is refused with that reason.

The contract: `env.type` names a `load_environment(**kwargs)` function (what a verifiers
environment module exports; `env.params` are its keyword arguments) or a `vf.Environment`
instance. Each episode runs the environment's own rollout (`env.rollout`: its `setup_state`, stop
conditions, `max_turns`, `env_response`) with a client that is not a model server: every model
request of the rollout becomes one policy turn of reinforge's rollout loop.

- The rollout input is the task: its prompt (text or chat messages; the env's system prompt and
  few-shot messages put in front as the env's dataset formatting does), `answer`,
  `task.metadata["info"]` (default {}) and `metadata["example_id"]`. The env's own dataset
  becomes reinforge tasks with the task source in this module: `task.source:
  reinforge.envs.adapters.verifiers_env:dataset_tasks` and `task.params: {environment: <the same
  import path>, args: {...}}` (its train and eval datasets, as `get_dataset` / `get_eval_dataset` give them).
- The policy's turn goes back to the rollout as the assistant message's text; the messages the
  env adds before its next model request (its `env_response`) are the observation, tokenized
  once. An env that rewrites earlier messages (non-linear histories) cannot be run token-exactly
  and is an error of the episode.
- When the rollout ends (a stop condition, or `env.max_turns`, which cuts the rollout as an
  over-long prompt would), its rubric scores it (`rubric.score_rollout`); `state["reward"]` is
  reported as `info["env_reward"]`: use it with `reward.components: [{name: env, fn: env_reward}]`.
- Only rubrics that run locally are supported: a `JudgeRubric` (which calls a model API) or a
  group reward function (which needs the whole group's states at once) is refused before any
  model is loaded. Tool-calling envs (`vf.ToolEnv`) are not supported: policy turns are plain text.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import queue
import signal
import threading
import time
import uuid
import weakref
from typing import Any

from transformers import PreTrainedTokenizerBase

from reinforge.config import Config
from reinforge.envs.adapters.async_loop import BackgroundLoop
from reinforge.envs.adapters.base import AdapterError, EnvAdapter
from reinforge.envs.adapters.chat_text import ChatTextEnv, as_messages, reward_info
from reinforge.envs.base import StepResult
from reinforge.envs.single_turn import chat_messages
from reinforge.import_paths import check_call, describe
from reinforge.tasks.task import Task

SUPPORTED = ((0, 2), (0, 4))  # [min, max)
INSTALL = "pip install 'reinforge[verifiers]' (verifiers>=0.2,<0.4)"
CONTRACT = (
    "a verifiers environment is a load_environment(**env.params) function returning a verifiers Environment "
    "(SingleTurnEnv, MultiTurnEnv, ...; verifiers>=0.2,<0.4), or such an Environment instance"
)
DEFAULT_WAIT_S = 300.0


def import_verifiers() -> Any:
    try:
        import verifiers
    except ImportError:
        raise AdapterError(f"the verifiers package is not installed: {INSTALL}") from None
    version = tuple(int(p) for p in verifiers.__version__.split(".")[:2] if p.isdigit())
    if not SUPPORTED[0] <= version < SUPPORTED[1]:
        raise AdapterError(
            f"verifiers {verifiers.__version__} is installed; reinforge drives the classic Environment API of "
            f"verifiers>=0.2,<0.4 (0.4 replaced it with harnesses that call a model server): {INSTALL}"
        )
    return verifiers


def load_environment(obj: Any, params: dict) -> Any:
    """The Environment: `obj(**params)` for a loader (the handlers verifiers installs for SIGINT and
    SIGTERM are put back, so reinforge's graceful stop keeps working), or `obj` itself."""
    vf = import_verifiers()
    if isinstance(obj, vf.Environment):
        return obj
    in_main = threading.current_thread() is threading.main_thread()
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    try:
        env = obj(**params)
    except Exception as err:  # noqa: BLE001 - the user's loader: its error, named
        raise AdapterError(f"{describe(obj)}(**{params}) raised {type(err).__name__}: {err}") from None
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    if not isinstance(env, vf.Environment):
        raise AdapterError(f"{describe(obj)} returned a {type(env).__name__}, not a verifiers Environment; {CONTRACT}")
    return env


def rubrics(rubric: Any, vf: Any) -> list[Any]:
    if isinstance(rubric, vf.RubricGroup):
        return [r for inner in rubric.rubrics for r in rubrics(inner, vf)]
    return [rubric]


def check_runs_locally(env: Any, vf: Any) -> None:
    """Refuse what reinforge cannot score episode by episode, on this machine."""
    if isinstance(env, vf.ToolEnv):
        raise AdapterError(f"{type(env).__name__} is a verifiers ToolEnv; tool-calling verifiers envs are not supported (policy turns are plain text)")
    parts = rubrics(env.rubric, vf)
    judges = [type(r).__name__ for r in parts if isinstance(r, vf.JudgeRubric)]
    if judges:
        raise AdapterError(f"the rubric holds {', '.join(judges)}, which calls a model API to judge; only rubrics that run locally are supported")
    grouped = [f.__name__ for r in parts for f in r.funcs if r._is_group_func(f)]
    if grouped:
        raise AdapterError(f"the rubric has group reward functions ({', '.join(grouped)}); reinforge scores each episode on its own")
    if not any(w != 0 for r in parts for w in r.weights):
        raise AdapterError("the rubric has no reward function with a non-zero weight; there is nothing to train on")


class Channel:
    """One episode's link between the verifiers rollout (on the background loop) and the rollout
    loop's thread: model requests come out of `requests`, policy turns go into `pending`."""

    def __init__(self) -> None:
        self.requests: queue.Queue = queue.Queue()
        self.pending: Any = None  # the asyncio.Future the current model request awaits
        self.abandoned = False


def abandon(channel: Channel, loop: BackgroundLoop, overlong: type) -> None:
    """Ends a rollout whose episode the loop dropped (cut by tokens, or garbage): its pending
    model request fails as an over-long prompt, so the coroutine finishes instead of waiting."""
    channel.abandoned = True

    def cut() -> None:
        if channel.pending is not None and not channel.pending.done():
            channel.pending.set_exception(overlong("episode ended by reinforge"))

    loop.call_soon(cut)


@functools.cache
def policy_turn_client(vf: Any) -> type:
    """A verifiers Client class whose model is reinforge's policy: each request waits for a turn."""
    from verifiers.types import Response, ResponseMessage

    class PolicyTurnClient(vf.Client):
        def __init__(self, channel: Channel) -> None:
            super().__init__(None)
            self.channel = channel

        def setup_client(self, config):  # pragma: no cover - never configured
            return None

        async def to_native_tool(self, tool):  # pragma: no cover - tools are refused
            return tool

        async def to_native_prompt(self, messages):  # pragma: no cover - get_response is overridden
            return messages, {}

        async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):  # pragma: no cover
            # verifiers' Client declares it abstract; this client answers in get_response (one
            # policy turn per request), so a call here means a verifiers whose loop bypasses it.
            raise AdapterError(
                "this verifiers version asked the client for a native response instead of calling get_response; "
                "reinforge supports verifiers>=0.2,<0.4 (pip install 'reinforge[verifiers]')"
            )

        async def raise_from_native_response(self, response):  # pragma: no cover
            return None

        async def from_native_response(self, response):  # pragma: no cover
            return response

        async def close(self) -> None:
            return None

        async def get_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            channel = self.channel
            if channel.abandoned:
                raise vf.OverlongPromptError("episode ended by reinforge")
            channel.pending = asyncio.get_running_loop().create_future()
            channel.requests.put(("turn", prompt))
            text, finish_reason = await channel.pending
            message = ResponseMessage(content=text, finish_reason=finish_reason, is_truncated=finish_reason == "length")
            return Response(id=uuid.uuid4().hex, created=int(time.time()), model=model, message=message)

    return PolicyTurnClient


class VerifiersTextEnv(ChatTextEnv):
    def __init__(self, vf_env: Any, tokenizer: PreTrainedTokenizerBase, max_turns: int, max_observation_tokens: int, wait_s: float):
        super().__init__(tokenizer, max_turns, max_observation_tokens)
        self.vf = import_verifiers()
        self.vf_env = vf_env
        self.loop = BackgroundLoop("reinforge-verifiers")
        self.wait_s = wait_s

    def episode(self) -> "VerifiersEpisode":
        return VerifiersEpisode(self)


def rollout_input(task: Task, vf_env: Any) -> dict:
    """The rollout input of `task`: its prompt as chat messages (with the env's system prompt and
    few-shot messages in front, as the env's own dataset formatting writes them, unless the
    prompt already starts with a system message), answer, info and example id."""
    messages = chat_messages(task)
    if not messages or messages[0].get("role") != "system":
        head = [{"role": "system", "content": vf_env.system_prompt}] if vf_env.system_prompt else []
        messages = head + list(vf_env.few_shot or []) + messages
    return {"prompt": messages, "answer": task.answer, "info": task.metadata.get("info", {}),
            "example_id": task.metadata.get("example_id", 0)}


async def run_rollout(vf_env: Any, vf: Any, channel: Channel, task: Task) -> None:
    """The env's own rollout, then its rubric; the outcome goes to the episode through `channel`.
    (A function, not a method: the pending coroutine must not keep the episode alive, so that an
    episode the rollout loop drops is collected and its rollout ended by `abandon`.)"""
    try:
        state = await vf_env.rollout(rollout_input(task, vf_env), policy_turn_client(vf)(channel), "reinforge-policy", {})
        if state.get("error") is None:
            await vf_env.rubric.score_rollout(state)
        channel.requests.put(("done", state))
    except BaseException as err:  # noqa: BLE001 - handed to the episode, which raises it
        channel.requests.put(("error", err))


class VerifiersEpisode:
    def __init__(self, env: VerifiersTextEnv):
        self.env = env
        self.channel = Channel()
        self.messages: list[dict] = []
        self.steps = 0
        weakref.finalize(self, abandon, self.channel, env.loop, env.vf.OverlongPromptError)

    def _next(self) -> tuple[str, Any]:
        try:
            kind, payload = self.channel.requests.get(timeout=self.env.wait_s)
        except queue.Empty:
            raise AdapterError(f"the verifiers rollout did not answer within {self.env.wait_s:g}s") from None
        if kind == "error":
            raise AdapterError(f"the verifiers rollout raised {type(payload).__name__}: {payload}") from payload
        return kind, payload

    def reset(self, task: Task) -> list[int]:
        self.env.loop.submit(run_rollout(self.env.vf_env, self.env.vf, self.channel, task))
        kind, payload = self._next()
        if kind != "turn":
            raise AdapterError("the verifiers rollout ended before asking the model anything")
        self.messages = as_messages(payload, what="verifiers prompt")
        return self.env.chat.prompt_ids(self.messages)

    def _score(self, state: Any, finish_reason: str) -> StepResult:
        if state.get("error") is not None:
            raise AdapterError(f"the verifiers rollout ended with an error: {state['error']!r}")
        info = reward_info(state.get("reward"), "the verifiers rubric")
        info["finish_reason"] = finish_reason
        return StepResult(done=True, info=info)

    def step(self, turn_text: str, finish_reason: str) -> StepResult:
        self.steps += 1
        pending = self.channel.pending
        self.env.loop.call_soon(pending.set_result, (turn_text, finish_reason))
        kind, payload = self._next()
        if kind == "done":
            return self._score(payload, finish_reason)
        if self.steps >= self.env.max_turns:  # reinforge's turn cap: end the rollout, then score it
            abandon(self.channel, self.env.loop, self.env.vf.OverlongPromptError)
            kind, payload = self._next()
            if kind != "done":
                raise AdapterError("the verifiers rollout asked for another turn after it was cut")
            return self._score(payload, "max_turns")
        messages = as_messages(payload, what="verifiers prompt")
        seen = self.messages + [{"role": "assistant", "content": turn_text}]
        if messages[: len(seen)] != seen:
            raise AdapterError("the verifiers env rewrote earlier messages of the episode; only linear histories run token-exactly")
        added = messages[len(seen):]
        if not added:
            raise AdapterError("the verifiers env asked for another turn without adding a message")
        self.messages = messages
        ids, text = self.env.observation(added)
        return StepResult(observation_ids=ids, observation_text=text)


def matches(obj: Any) -> bool:
    if callable(obj) and getattr(obj, "__name__", None) == "load_environment" and not inspect.isclass(obj):
        return True
    return any(c.__module__.startswith("verifiers.") and c.__name__ == "Environment" for c in type(obj).__mro__)


def check(obj: Any, cfg: Config) -> None:
    vf = import_verifiers()
    if not isinstance(obj, vf.Environment):
        check_call(obj, (), cfg.env.params, f"{cfg.env.type}, called as load_environment(**env.params),", CONTRACT)
    check_runs_locally(load_environment(obj, cfg.env.params), vf)


def build(obj: Any, cfg: Config, tokenizer: PreTrainedTokenizerBase) -> VerifiersTextEnv:
    vf_env = load_environment(obj, cfg.env.params)
    check_runs_locally(vf_env, import_verifiers())
    wait = cfg.env.tool_timeout_s or DEFAULT_WAIT_S
    return VerifiersTextEnv(vf_env, tokenizer, cfg.env.max_turns, cfg.env.max_observation_tokens, wait)


ADAPTER = EnvAdapter(
    name="verifiers environment",
    matches=matches,
    build=build,
    check=check,
    contract=CONTRACT,
    missing=lambda obj: ["load_environment (a function of that name)"],
)


def dataset_tasks(cfg: Any, seed: int) -> Any:
    """A task source: the verifiers environment's own datasets as reinforge tasks.

    `task.params.environment` is the import path of `load_environment` (or of an Environment),
    `task.params.args` its keyword arguments. Training tasks are the env's dataset (`train_size`
    of them at most), held-out tasks its eval dataset (`eval_size` at most; verifiers falls back to
    the training dataset when the env has none)."""
    from reinforge.config import ConfigError
    from reinforge.import_paths import ImportPathError, load_object
    from reinforge.tasks.task import TaskSplits

    path = cfg.params.get("environment")
    if not isinstance(path, str):
        raise ConfigError("task.params.environment: the import path of the verifiers load_environment is required")
    try:
        vf_env = load_environment(load_object(path), dict(cfg.params.get("args") or {}))
    except (AdapterError, ImportPathError) as err:
        raise ConfigError(f"task.params.environment: {err}") from None

    def tasks(rows: Any, limit: int, split: str) -> list[Task]:
        out = []
        for row in list(rows)[:limit]:
            example = row.get("example_id", len(out))
            messages = as_messages(row["prompt"], what=f"{split} dataset prompt")
            out.append(Task(id=f"{split}-{example}", prompt=messages, answer=str(row.get("answer") or ""),
                            metadata={"info": row.get("info") or {}, "example_id": example}))
        return out

    return TaskSplits(train=tasks(vf_env.get_dataset(), cfg.train_size, "train"),
                      eval=tasks(vf_env.get_eval_dataset(), cfg.eval_size, "eval"))
