"""Env settings are checked before any model is loaded; each refusal names the key."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.run.env_factory import build_env
from reinforge.envs.tool_env import ToolEnv
from reinforge.run.preflight import preflight


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["env.type=tool"], "needs at least one tool"),
        (["env.type=tool", "env.tools=[abacus]"], "unknown tool"),
        (["env.type=tool", "env.tools=[sql]"], "db_path"),
        (["env.tools=[calculator]"], "single_turn never calls tools"),
        (["env.type=tool", "env.tools=[calculator]", "rollout.prompt_format=raw"], "prompt_format=raw"),
        (["env.type=tool", "env.tools=[search]", "env.tool_options={search: {documents: /nonexistent/docs.jsonl}}"], "env.tools"),
    ],
)
def test_bad_env_configs_are_refused_up_front(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        preflight(load_config("default", ["rollout.prompt_format=auto", *overrides]))


def test_tool_agent_recipe_builds_a_tool_env(tokenizer) -> None:
    cfg = load_config("tool-agent")
    preflight(cfg)
    env = build_env(cfg, tokenizer)
    assert isinstance(env, ToolEnv) and env.registry.names() == ["calculator"] and env.max_turns == 3
