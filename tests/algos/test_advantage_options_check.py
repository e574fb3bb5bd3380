"""Options of one estimator are refused with another, before any model (reinforge config validate)."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.run.preflight import preflight


@pytest.mark.parametrize("overrides, message", [
    (["algo.reinforce_reward=signed"], "is an option of algo.advantage=reinforce"),
    (["algo.method=w_reinforce", "algo.kl_coef=0.01", "algo.kl_in_reward=true"], "keep the KL in the loss"),
    (["algo.mars_discount=token"], "is an option of algo.advantage=mars"),
    (["algo.scale_rewards=batch", "algo.advantage=rloo"], "is an option of algo.advantage=grpo"),
    (["algo.method=remax", "trainer.partial_rollouts=true", "algo.tis_cap=2.0"], "needs one greedy rollout of each prompt"),
])
def test_refused(overrides, message) -> None:
    with pytest.raises(ConfigError, match=message):
        preflight(load_config("default", overrides))


@pytest.mark.parametrize("method", ["w_reinforce", "remax", "opo", "gpg"])
def test_presets_validate(method: str) -> None:
    preflight(load_config("default", [f"algo.method={method}"]))
