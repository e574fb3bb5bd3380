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
        ([*PRUNE, "env.type=game", "engine.type=vllm"], "only our in-process PyTorch engine's decode loop"),
        ([*PRUNE, "env.type=gateway", "workers.workers=1"], "only our in-process PyTorch engine's decode loop"),
        ([*PRUNE, "env.type=game", "trainer.partial_rollouts=true", "algo.tis_cap=2.0"], "only our in-process PyTorch engine's decode loop"),
        (["success_head.enabled=true", "trainer.schedule=async", "algo.tis_cap=2.0", "engine.type=vllm"], "reads the sampling weights' logits"),
        ([*PRUNE, "success_head.min_group_size=9"], "exceeds rollout.group_size=8"),
        ([*PRUNE, "rollout.prompts_per_step=128"], "at most 512"),
        ([*PRUNE, "success_head.check_every=8"], "no pruning check would ever run"),
        (["progress.enabled=true"], "env.type=single_turn is not supported"),
        (["progress.enabled=true", "env.type=game"], "env.type=game is not supported"),
        (["progress.enabled=true", "env.type=tool", "algo.advantage=grpo"], "use a turn-level estimator"),
        (["progress.enabled=true", "env.type=tool", "algo.advantage=turn_rloo", "algo.turn_reward_fix=clip"], "leave them at none"),
    ],
)
def test_refused_with_the_reason(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_value_heads(load_config("default", overrides))


def test_supported_settings_pass() -> None:
    check_value_heads(load_config("default", [*PRUNE, "algo.dynamic_sampling=true"]))
    check_value_heads(load_config("default", ["progress.enabled=true", "env.type=tool", "algo.advantage=turn_rloo"]))
    # SPA-RL's own setup: PPO with a critic, gae taking each turn's progress reward at its last token.
    check_value_heads(load_config("default", ["progress.enabled=true", "env.type=tool", "critic.enabled=true", "algo.advantage=gae"]))
    check_value_heads(load_config("default"))
    # Lifted by the turn spans and the staleness filter (reinforge.values.capabilities):
    check_value_heads(load_config("default", ["success_head.enabled=true", "env.type=tool"]))
    check_value_heads(load_config("default", ["success_head.enabled=true", "env.type=text_game"]))
    check_value_heads(load_config("default", ["progress.enabled=true", "env.type='my_pkg.envs:MultiTurn'", "algo.advantage=turn_rloo"]))
    check_value_heads(load_config("default", [*PRUNE, "trainer.schedule=async", "algo.tis_cap=2.0"]))
    # Pruned between chunks of sampling on any engine (reinforge.rollout.pruned_sampling), in any turn-by-turn env:
    check_value_heads(load_config("default", [*PRUNE, "trainer.partial_rollouts=true", "algo.tis_cap=2.0"]))
    check_value_heads(load_config("default", [*PRUNE, "engine.type=vllm", "rollout.prompts_per_step=128"]))  # no one-batch bound
    check_value_heads(load_config("default", [*PRUNE, "workers.workers=2"]))
    check_value_heads(load_config("default", [*PRUNE, "env.type=tool"]))
    check_value_heads(load_config("default", [*PRUNE, "env.type=tool", "progress.enabled=true", "algo.advantage=turn_rloo"]))
    # Games and gateway agents: each seat's / piece's final turn trains the head; a game or an episode is pruned whole.
    for env in ("game", "gateway"):
        check_value_heads(load_config("default", [*PRUNE, f"env.type={env}"]))
    check_value_heads(load_config("default", ["success_head.enabled=true", "trainer.partial_rollouts=true", "algo.tis_cap=2.0"]))
    check_value_heads(load_config("default", ["progress.enabled=true", "env.type=tool", "algo.advantage=turn_rloo", "trainer.schedule=async", "algo.tis_cap=2.0"]))
    check_value_heads(load_config("default", ["progress.enabled=true", "env.type=tool", "algo.advantage=turn_rloo", "trainer.partial_rollouts=true", "algo.tis_cap=2.0"]))
