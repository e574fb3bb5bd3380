"""What the success head, rollout pruning and turn progress cannot serve is refused before compute."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.values.value_heads_check import check_value_heads

PRUNE = ["success_head.enabled=true", "success_head.prune=true"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["success_head.prune=true"], "set success_head.enabled=true"),
        ([*PRUNE, "trainer.schedule=async", "algo.tis_cap=2.0"], "trainer.schedule=async is not supported"),
        ([*PRUNE, "trainer.partial_rollouts=true", "algo.tis_cap=2.0"], "trainer.partial_rollouts=true is not supported"),
        ([*PRUNE, "engine.type=vllm"], "engine.type=vllm has no such hook"),
        ([*PRUNE, "workers.workers=2"], "Ray rollout workers"),
        ([*PRUNE, "env.type=tool"], "env.type=tool is not supported"),
        ([*PRUNE, "success_head.min_group_size=9"], "exceeds rollout.group_size=8"),
        ([*PRUNE, "rollout.prompts_per_step=128"], "at most 512"),
        ([*PRUNE, "success_head.check_every=8"], "no pruning check would ever run"),
        (["progress.enabled=true"], "env.type=single_turn has no such episodes"),
        (["progress.enabled=true", "env.type=tool", "algo.advantage=grpo"], "use a turn-level estimator"),
        (["progress.enabled=true", "env.type=tool", "algo.advantage=turn_rloo", "algo.turn_reward_fix=clip"], "leave them at none"),
        (["progress.enabled=true", "env.type=tool", "algo.advantage=turn_rloo", "trainer.schedule=async", "algo.tis_cap=2.0"], "use trainer.schedule=sync"),
    ],
)
def test_refused_with_the_reason(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_value_heads(load_config("default", overrides))


def test_supported_settings_pass() -> None:
    check_value_heads(load_config("default", [*PRUNE, "algo.dynamic_sampling=true"]))
    check_value_heads(load_config("default", ["progress.enabled=true", "env.type=tool", "algo.advantage=turn_rloo"]))
    check_value_heads(load_config("default"))
