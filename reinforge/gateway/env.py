"""The `gateway` env: train an agent program written against the OpenAI client, as it is.

`env.type: gateway`, `env.agent: "my_pkg.agent:solve"`: each episode is one call of the user's
`async def solve(task, client, **env.params) -> result` in the agent process
(gateway.agent_runner), its `client` pointed at a gateway session (reinforge.gateway: an
OpenAI-compatible server on 127.0.0.1 backed by the run's engine, which records the sampled tokens
and their behaviour log-probs). The rollout loop hands a whole rollout to `run_groups`; this env
opens one session per episode (the run's sampling, `n` up to the group size, at most
`env.max_turns` model calls), runs the agents, closes each session as its agent ends, and turns
the session's token-exact pieces into Trajectories: one per piece, the lead piece first
(`episode_part` 0, rollout.episode_parts), all with the agent's result as `response_text` (a str
as it is, other values as JSON) and in `agent_result`.

An agent that raised, timed out, returned None or a result that cannot be pickled ends its
episode with finish reason `agent_error` and the error on the trajectory: it is counted
(env/agent_errors, env/agent_timeouts, ...) and left out of the loss; in an evaluation it counts as
not solved.

Rollout pruning (`run_groups(..., decode_hook=)`, reinforge.gateway.session_pruning): a group is the
task's `group_size` episodes, an episode is pruned whole, and all its pieces come back with finish
reason "pruned" (they leave the loss, not scored).

Warm-up and the budget checks lay a task out as the agent's first request renders it:
the task's prompt as the first user message, with `env.agent_tools` (the agent's list of OpenAI
tool schemas, by import path) given to the chat template; demonstrated tool calls are written in
`env.tool_format`, the syntax the gateway parses into `tool_calls`.
"""

from __future__ import annotations

import atexit
import json
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

from transformers import PreTrainedTokenizerBase

from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.chat_format import ChatFormat
from reinforge.envs.single_turn import chat_messages
from reinforge.envs.tool_env import assistant_text, demonstration_turns
from reinforge.envs.tools.registry import Tool, ToolRegistry
from reinforge.gateway.agent_outcome import AgentOutcome
from reinforge.gateway.agent_runner import AgentJob, AgentRunner
from reinforge.gateway.session_pruning import PRUNED, SessionPruning
from reinforge.rollout.episode_parts import AGENT_ERROR
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

MODEL_NAME = "policy"
FAILURE_STATS = {"raised": "agent_errors", "timeout": "agent_timeouts", "killed": "agent_timeouts", "none": "agent_no_result", "unpicklable": "agent_no_result"}


class GatewayEnvError(RuntimeError):
    pass


_OPEN_ENVS: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_open_envs() -> None:
    """The fallback when a run ends without closing its env: no server or agent process is left."""
    for env in list(_OPEN_ENVS):
        env.close()


def default_gateway(*args, **kwargs):
    """The run's OpenAI-compatible server (reinforge.gateway.server), built lazily: warm-up and
    validation never start it."""
    from reinforge.gateway import Gateway

    return Gateway(*args, **kwargs)


def result_text(result: Any) -> str:
    """What the verifier checks: a str as it is, anything else as JSON (repr when not JSON)."""
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result)
    except (TypeError, ValueError):
        return repr(result)


def transcript_entry(message: dict) -> dict:
    """An OpenAI message as the run report shows a turn (role, text), the message itself kept
    (rewards of the form fn(task, result, transcript) get the messages)."""
    role = message.get("role", "?")
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    text = str(content or "")
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        text += f"\n[tool call] {function.get('name')}({function.get('arguments')})"
    return {"role": "policy" if role == "assistant" else role, "text": text, "message": message}


def schema_registry(schemas: list[dict] | None) -> ToolRegistry:
    """A registry of the agent's tools (names and parameters only; nothing runs here), so that a
    demonstration's calls are written the way the gateway parses them."""
    registry = ToolRegistry()
    for schema in schemas or []:
        function = schema.get("function", schema)
        registry.register(Tool(function["name"], function.get("description") or function["name"],
                               function.get("parameters") or {"type": "object", "properties": {}}, fn=lambda **_: None))
    return registry


class GatewayEnv:
    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        agent: str | Any,
        params: dict | None = None,
        tool_format: str = "compact",
        max_turns: int = 4,
        agent_timeout_s: float = 60.0,
        agent_tools: list[dict] | None = None,
        window_ms: float = 50.0,
        agent_concurrency: int = 256,
        max_new_tokens: int = 256,
        gateway_factory: Callable[..., Any] | None = None,
    ):
        self.tokenizer = tokenizer
        self.agent, self.params = agent, dict(params or {})
        self.tool_format, self.max_turns = tool_format, max_turns
        self.agent_timeout_s, self.window_s = float(agent_timeout_s), window_ms / 1000.0
        self.agent_concurrency, self.max_new_tokens = agent_concurrency, max_new_tokens
        self.agent_tools = agent_tools or None
        self.chat = ChatFormat(tokenizer, tools=self.agent_tools)
        self.stop_token_ids = tuple(dict.fromkeys([self.chat.end_of_turn_id, tokenizer.eos_token_id]))
        # The agent's tools by name (nothing runs here): demonstrations are written with it, and its
        # presence makes the loop report tool rates (tool_call_rate, valid_call_rate), as for the tool env.
        self.registry = schema_registry(self.agent_tools)
        self._gateway_factory = gateway_factory
        # id(engine) -> (its gateway, its agent process): see `gateway_for`
        self._gateways: dict[int, tuple[Any, AgentRunner]] = {}
        self._lock = threading.Lock()
        self._episodes = 0  # session keys stay unique over the run
        _OPEN_ENVS.add(self)

    # ------------------------------------------------------------------ layout (warm-up, budgets, eval)

    def prompt_ids(self, task: Task) -> list[int]:
        return self.chat.prompt_ids(chat_messages(task))

    def decode_response(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def assistant_text(self, message: dict) -> str:
        return assistant_text(message, self.tool_format, self.registry)

    def demonstration_turns(self, task: Task) -> list[str]:
        return demonstration_turns(task, self.assistant_text)

    def sft_example(self, task: Task) -> tuple[list[int], list[bool]]:
        """The agent's first request as the gateway renders it, then the demonstration: assistant
        turns trained, tool messages in between as the observations the gateway would record."""
        demo = task.sft_target
        messages = [{"role": "assistant", "content": demo}] if isinstance(demo, str) else list(demo)
        if not messages or messages[-1].get("role") != "assistant":
            raise GatewayEnvError(f"task {task.id}: a demonstration must end with an assistant message")
        return self.chat.demonstration_ids(self.prompt_ids(task), messages, self.assistant_text)

    def episode(self):
        raise GatewayEnvError(
            "env.type=gateway runs whole rollouts through the agent (run_groups); it has no turn-by-turn episode "
            "(trainer.partial_rollouts cannot be used with it)"
        )

    # ------------------------------------------------------------------ rollout

    def gateway_for(self, engine: Engine, max_context_tokens: int | None):
        """The gateway and the agent process that serve `engine`'s episodes, started on first use.

        Each user of the env samples through an engine of its own: a sync run through the loop's
        engine alone (one gateway, one agent process, as before); an async run's producer through
        its lane, while held-out evaluation goes through the loop's engine. Each gets its own
        gateway and its own agent process, so the two run side by side without waiting for each
        other: an agent process serves one rollout at a time over its pipe, a rollout can take up
        to env.agent_timeout_s, and a hung agent kills its process with every episode in it
        (gateway.agent_runner), which must not take the other user's episodes along."""
        with self._lock:
            served = self._gateways.get(id(engine))
            if served is None:
                factory = self._gateway_factory or default_gateway
                gateway = factory(
                    engine, self.tokenizer, model_name=MODEL_NAME, tool_format=self.tool_format,
                    max_new_tokens=self.max_new_tokens, max_context_tokens=max_context_tokens, window_s=self.window_s,
                )
                gateway.start()
                runner = AgentRunner(self.agent, self.params, self.agent_timeout_s, gateway.api_key, self.agent_concurrency)
                served = self._gateways[id(engine)] = (gateway, runner)
            return served

    def run_groups(
        self, engine: Engine, tasks: list[Task], group_size: int, params: SamplingParams, seed: int | None,
        first_group_id: int = 0, max_episode_tokens: int | None = None, decode_hook=None,
    ) -> list[Trajectory]:
        """`group_size` agent episodes per task; trajectories in task order, each episode's pieces
        together, its lead piece first. `decode_hook`: rollout pruning's (the module docstring)."""
        gateway, runner = self.gateway_for(engine, max_episode_tokens)
        version = getattr(engine, "policy_version", 0)  # what this rollout samples with
        base_seed = 0 if seed is None else seed
        sessions, jobs, owners = {}, [], {}
        for index, task in enumerate(tasks):
            for member in range(group_size):
                with self._lock:  # (the async producer and evaluation open sessions from two threads)
                    self._episodes += 1
                    key = f"e{self._episodes}-g{first_group_id + index}-{member}"
                session = gateway.open_session(
                    key=key, sampling=params, seed=base_seed * 1_000_003 + index * 1_009 + member,
                    max_calls=self.max_turns, max_n=group_size, policy_version=None,
                )
                sessions[key] = session
                owners[key] = (task, first_group_id + index)
                jobs.append(AgentJob(key, task, session.base_url))

        def done(key: str, outcome: AgentOutcome) -> None:
            sessions[key].finish()  # the batcher no longer waits for this episode

        pruning = None
        if decode_hook is not None:
            pruning = SessionPruning(decode_hook, {key: group for key, (_, group) in owners.items()}, lambda key: sessions[key].finish())
            gateway.set_pruning(pruning)
        try:
            outcomes = runner.run(jobs, done)
        finally:
            if pruning is not None:
                gateway.set_pruning(None)
            for session in sessions.values():
                session.finish()  # idempotent; every session ends, whatever happened above
        trajectories: list[Trajectory] = []
        for job in jobs:
            task, group_id = owners[job.key]
            pieces = self.episode_trajectories(task, group_id, sessions[job.key], outcomes[job.key], version)
            if pruning is not None and pruning.is_pruned(job.key):  # the episode leaves the loss, every piece of it
                for piece in pieces:
                    piece.finish_reason = PRUNED
            trajectories += pieces
        return trajectories

    def episode_trajectories(self, task: Task, group_id: int, session, outcome: AgentOutcome, version: int = 0) -> list[Trajectory]:
        """`version`: the policy version of the rollout, given to an episode that never called the
        model (its age is then 0 under any schedule; version 0 would read as arbitrarily stale)."""
        parts = list(session.parts())
        stats = Counter(model_calls=session.calls, splits=session.splits, branches=session.branches, pieces=len(parts))
        session_errors = session.errors if isinstance(session.errors, list) else []
        stats["gateway_errors"] = len(session_errors) if isinstance(session.errors, list) else int(session.errors or 0)
        errors = [f"gateway: {e}" for e in session_errors]
        if not outcome.ok:
            stats[FAILURE_STATS[outcome.failure]] += 1
            errors.append(f"agent {outcome.failure}: {outcome.error}")
        text = result_text(outcome.result) if outcome.ok else ""
        finish_default = "stop" if outcome.ok else AGENT_ERROR
        messages = parts[-1].messages if parts else []
        # Tool calls the model wrote: parsed into OpenAI tool_calls (valid), or malformed (the gateway
        # returned them as text). What the agent's own tools then did is the agent's business.
        valid = sum(len(m.get("tool_calls") or []) for p in parts for m in p.messages if m.get("role") == "assistant")
        malformed = int(getattr(session, "malformed_tool_calls", 0) or 0)
        stats.update(tool_calls=valid + malformed, valid_calls=valid, tool_errors=malformed)
        transcript = [transcript_entry(m) for m in messages]
        if not parts:  # the agent never called the model: nothing to train, its result still counts in the group
            prompt = self.prompt_ids(task)
            parts_data = [dict(token_ids=prompt, loss_mask=[False] * len(prompt), logprobs=[0.0] * len(prompt),
                               turn_spans=[], prompt_length=len(prompt), finish_reason="stop", policy_version=version)]
            stats["no_model_calls"] = 1
        else:
            parts_data = [dict(token_ids=list(p.token_ids), loss_mask=list(p.loss_mask), logprobs=list(p.logprobs),
                               turn_spans=list(p.turn_spans), prompt_length=p.prompt_length, finish_reason=p.finish_reason,
                               policy_version=p.policy_version) for p in parts]
        out = []
        for number, part in enumerate(parts_data):
            lead = number == 0
            out.append(Trajectory(
                task_id=task.id, group_id=group_id, token_ids=part["token_ids"], loss_mask=part["loss_mask"],
                behaviour_logprobs=part["logprobs"], turn_spans=part["turn_spans"], prompt_length=part["prompt_length"],
                response_text=text, policy_version=part["policy_version"] or 0,
                finish_reason=(part["finish_reason"] if outcome.ok else AGENT_ERROR) or finish_default,
                errors=list(errors) if lead else [], transcript=transcript if lead else [],
                stats={k: float(v) for k, v in stats.items()} if lead else {},
                episode_part=number, agent_result=outcome.result,
            ))
        return out

    # ------------------------------------------------------------------ end

    def close(self) -> None:
        """Stop the agent process and every gateway (server thread joined, port closed); idempotent."""
        _OPEN_ENVS.discard(self)
        with self._lock:
            served, self._gateways = list(self._gateways.values()), {}
        for _, runner in served:
            runner.close()
        for gateway, _ in served:
            gateway.close()
