"""Preflight of rollout correction and of inexact engines: a bad level or band is refused naming
the key; an engine that is not exact (bf16 on either side, engines on other machines) without
algo.tis_cap is warned about before compute."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.run.preflight import engine_gap_warnings, preflight


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        preflight(load_config("default", list(overrides)))
    return str(err.value)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["algo.tis_level=sequence"], "algo.tis_cap is unset"),
        (["algo.rollout_mask=sequence"], "needs algo.rollout_mask_high"),
        (["algo.rollout_mask_high=2.0"], "algo.rollout_mask, which is unset"),
        (["algo.rollout_mask=geometric", "algo.rollout_mask_high=0.9"], "must hold 1"),
        (["algo.rollout_mask=token", "algo.rollout_mask_low=1.5", "algo.rollout_mask_high=2.0"], "must hold 1"),
    ],
)
def test_bad_rollout_correction_is_refused(overrides, expected) -> None:
    assert expected in refused(*overrides)


def test_unknown_level_and_negative_band_are_schema_errors() -> None:
    with pytest.raises(ConfigError, match="algo.tis_level"):
        load_config("default", ["algo.tis_level=turn"])
    with pytest.raises(ConfigError, match="algo.rollout_mask_low"):
        load_config("default", ["algo.rollout_mask_low=-1"])


def test_valid_rollout_correction_passes() -> None:
    preflight(load_config("default", ["algo.tis_cap=2.0", "algo.tis_level=geometric", "algo.rollout_mask=geometric", "algo.rollout_mask_high=1.001"]))


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (["rollout.engine_dtype=bfloat16"], "rollout.engine_dtype=bfloat16"),
        (["algo.bf16_autocast=true"], "algo.bf16_autocast=true"),
        (["workers.workers=2", "workers.address=10.0.0.7:6379"], "workers.address=10.0.0.7:6379"),
    ],
)
def test_an_inexact_engine_without_tis_cap_is_warned_about(overrides, reason, capsys) -> None:
    cfg = load_config("default", overrides)
    [warning] = engine_gap_warnings(cfg)
    assert reason in warning and "algo.tis_cap" in warning
    assert engine_gap_warnings(load_config("default", [*overrides, "algo.tis_cap=2.0"])) == []
    if not overrides[0].startswith("workers"):  # (preflight itself would ask for Ray)
        preflight(cfg)
        assert "reinforge: warning:" in capsys.readouterr().err


def test_the_exact_default_engine_is_not_warned_about() -> None:
    assert engine_gap_warnings(load_config("default", [])) == []
