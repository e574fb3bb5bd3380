"""`env.type: gateway` from the config: its checks (before any model is loaded) and its build."""

from __future__ import annotations

import inspect
from typing import Any

from transformers import PreTrainedTokenizerBase

from reinforge.config import Config, ConfigError
from reinforge.import_paths import ImportPathError, check_call, describe, load_object

AGENT_CONTRACT = (
    "an agent is `async def agent(task, client, **env.params) -> result` (client: an openai.AsyncOpenAI pointed at "
    "the run's gateway), or a plain function of the same shape (given an openai.OpenAI client)"
)
GATEWAY_ONLY_KEYS = ("agent", "agent_tools")


def load_agent_tools(path: str) -> list[dict]:
    """The agent's OpenAI tool schemas ({"type": "function", "function": {"name", ...}}), checked."""
    tools = load_object(path)
    if callable(tools) and not isinstance(tools, list):
        tools = tools()
    if not isinstance(tools, list) or not tools:
        raise ConfigError(f"env.agent_tools: {path} is a {type(tools).__name__}, not a non-empty list of OpenAI tool schemas")
    for i, schema in enumerate(tools):
        function = schema.get("function") if isinstance(schema, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ConfigError(
                f"env.agent_tools: {path}[{i}] is not an OpenAI function tool schema "
                "({'type': 'function', 'function': {'name': ..., 'description': ..., 'parameters': {...}}})"
            )
    return tools


def check_agent(agent: Any, params: dict, label: str) -> None:
    if inspect.isclass(agent):
        raise ConfigError(f"env.agent: {label} is a class; {AGENT_CONTRACT}")
    try:
        check_call(agent, (None, None), params, f"env.agent: {label}, called as agent(task, client, **env.params),", AGENT_CONTRACT)
    except ImportPathError as err:
        raise ConfigError(str(err)) from None


def check_gateway_env(cfg: Config) -> None:
    env = cfg.env
    if not env.agent:
        raise ConfigError(f"env.type=gateway needs env.agent: your agent by import path ('my_pkg.agent:solve'); {AGENT_CONTRACT}")
    try:
        agent = load_object(env.agent)
    except ImportPathError as err:
        raise ConfigError(f"env.agent: {err}") from None
    check_agent(agent, env.params, env.agent if isinstance(env.agent, str) else describe(agent))
    if env.agent_tools:
        try:
            load_agent_tools(env.agent_tools)
        except ImportPathError as err:
            raise ConfigError(f"env.agent_tools: {err}") from None
    if env.tools:
        raise ConfigError(f"env.tools={env.tools} are the built-in tool env's; a gateway agent runs its own tools (name their schemas in env.agent_tools)")
    if cfg.trainer.partial_rollouts:
        raise ConfigError("trainer.partial_rollouts cannot resume an agent program mid-episode; set trainer.partial_rollouts=false with env.type=gateway")
    if cfg.rollout.prompt_format == "raw":
        raise ConfigError("env.type=gateway renders the agent's messages with the chat template; rollout.prompt_format=raw cannot hold them (use auto or chat)")


def check_not_gateway(cfg: Config) -> None:
    for key in GATEWAY_ONLY_KEYS:
        if getattr(cfg.env, key):
            raise ConfigError(f"env.{key} is for env.type=gateway (an agent program); env.type={cfg.env.type} does not use it")


def build_gateway_env(cfg: Config, tokenizer: PreTrainedTokenizerBase, agent: Any = None):
    """`agent`: an object handed over from Python, else env.agent is sent to the agent process by path."""
    from reinforge.gateway.env import GatewayEnv

    e = cfg.env
    max_new = max(cfg.rollout.max_new_tokens, cfg.eval.max_new_tokens or 0)
    return GatewayEnv(
        tokenizer, agent if agent is not None else e.agent, e.params, e.tool_format, e.max_turns, e.agent_timeout_s,
        load_agent_tools(e.agent_tools) if e.agent_tools else None, e.gateway_window_ms, e.agent_concurrency, max_new,
    )
