"""Preflight of rollout schedules: what async and partial rollouts need, refused before compute."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.run.preflight import check_schedule


def check(*overrides: str) -> None:
    check_schedule(load_config("default", list(overrides)))


def test_sync_and_async_k0_need_no_correction() -> None:
    check()
    check("trainer.schedule=async", "trainer.max_staleness=0")
    check("trainer.schedule=async", "trainer.max_staleness=2", "algo.tis_cap=2.0")
    check("trainer.partial_rollouts=true", "algo.tis_cap=2.0")
    check("trainer.partial_rollouts=true", "algo.tis_cap=2.0", "env.type=tool", "env.tools=[calculator]", "env.max_turns=3")


def test_async_and_partial_rollouts_run_with_ray_workers() -> None:
    check("trainer.schedule=async", "trainer.max_staleness=1", "algo.tis_cap=2.0", "workers.workers=2")
    check("trainer.schedule=async", "trainer.max_staleness=2", "trainer.partial_rollouts=true", "algo.tis_cap=2.0", "workers.workers=2")


@pytest.mark.parametrize(
    "overrides, words",
    [
        (["trainer.schedule=async", "trainer.max_staleness=1"], ["algo.tis_cap", "trainer.max_staleness=1"]),
        (["trainer.partial_rollouts=true"], ["algo.tis_cap", "trainer.partial_rollouts"]),
        (["trainer.partial_rollouts=true", "algo.tis_cap=2", "trainer.max_staleness=0"], ["trainer.max_staleness >= 1"]),
        (["trainer.partial_rollouts=true", "algo.tis_cap=2", "env.type=gateway"], ["turn by turn", "env.type=gateway"]),
        (["trainer.partial_rollouts=true", "algo.tis_cap=2", "rollout.group_size=16", "trainer.overprovision=2"], ["1024", "trainer.overprovision"]),
    ],
)
def test_refusals_name_the_key(overrides: list[str], words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        check(*overrides)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_overprovision_is_bounded_by_the_schema() -> None:
    with pytest.raises(ConfigError, match="trainer.overprovision"):
        load_config("default", ["trainer.overprovision=3"])
