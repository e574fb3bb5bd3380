"""env.type=gateway is checked before any model is built: each mistake named with its key."""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.run.env_factory import check_env_config

AGENTS = Path(__file__).with_name("agents.py")
EXAMPLE = Path(__file__).parents[2] / "examples" / "gateway_agent" / "agent.py"
BASE = ["rollout.prompt_format=chat", "env.type=gateway"]


def check(*overrides: str) -> None:
    check_env_config(load_config("default", [*BASE, *overrides]))


def test_a_good_gateway_env_passes():
    check(f"env.agent={EXAMPLE}:solve", f"env.agent_tools={EXAMPLE}:TOOLS", "env.params={max_rounds: 2}")
    check(f"env.agent={AGENTS}:sync_agent", "env.params={suffix: '!'}")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ([], "env.type=gateway needs env.agent"),
        ([f"env.agent={AGENTS}:missing"], "env.agent: .*missing"),
        ([f"env.agent={AGENTS}:_started"], "env.agent: .* not a callable"),
        ([f"env.agent={AGENTS}:not_an_agent"], "env.agent: .*agent\\(task, client"),
        ([f"env.agent={EXAMPLE}:solve", "env.params={rounds: 2}"], "env.agent: .*rounds"),
        ([f"env.agent={EXAMPLE}:solve", f"env.agent_tools={EXAMPLE}:CALCULATOR"], "env.agent_tools: .*not a non-empty list"),
        ([f"env.agent={EXAMPLE}:solve", "env.tools=[calculator]"], "a gateway agent runs its own tools"),
        ([f"env.agent={EXAMPLE}:solve", "trainer.partial_rollouts=true"], "partial_rollouts"),
        ([f"env.agent={EXAMPLE}:solve", "rollout.prompt_format=raw"], "prompt_format=raw"),
    ],
)
def test_mistakes_are_named(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check(*overrides)


def test_agent_keys_belong_to_the_gateway_env():
    with pytest.raises(ConfigError, match="env.agent is for env.type=gateway"):
        check_env_config(load_config("default", [f"env.agent={EXAMPLE}:solve"]))
