"""`reinforge config validate` for the token-selection, masking and re-weighting keys: each new
name is accepted, and each bad value or combination is refused before compute, naming the key."""

from __future__ import annotations

import pytest

from reinforge.cli import main
from reinforge.config import ConfigError, load_config
from reinforge.run.preflight import preflight


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        preflight(load_config("default", list(overrides)))
    return str(err.value)


ACCEPTED = [
    ["algo.top_entropy_quantile=0.2"],
    ["algo.mask_truncated=true"],
    ["algo.off_policy_mask_threshold=0.5"],
    ["algo.tis_cap=2.0", "algo.tis_floor=0.5", "algo.tis_normalize=true"],
    ["algo.tis_cap=2.0", "algo.tis_level=sequence", "algo.tis_normalize=true"],
    ["algo.rollout_reject=[token_k3,seq_max_k2]", "algo.rollout_reject_threshold=[0.01]"],
    ["algo.rollout_reject=[seq_sum_k2,seq_mean_k3]", "algo.rollout_reject_threshold=[0.5,0.02]"],
    ["algo.pf_ppo=pow", "algo.pf_ppo_pow=3"],
    ["algo.pf_ppo=max_min"],
    ["algo.adaptive_entropy=true", "algo.entropy_target=1.5", "algo.entropy_coef_delta=0.01"],
    ["algo.method=beyond_80_20"],
    ["algo.method=pf_ppo"],
]


@pytest.mark.parametrize("overrides", ACCEPTED, ids=lambda o: " ".join(o))
def test_config_validate_accepts(overrides, capsys) -> None:
    assert main(["config", "validate", *overrides]) == 0, capsys.readouterr()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["algo.tis_floor=0.5"], "algo.tis_floor acts on the algo.tis_cap importance weights"),
        (["algo.tis_normalize=true"], "algo.tis_normalize acts on the algo.tis_cap"),
        (["algo.tis_cap=0.5", "algo.tis_floor=0.8"], "above algo.tis_cap"),
        (["algo.rollout_reject=[token_k2]"], "needs algo.rollout_reject_threshold"),
        (["algo.rollout_reject_threshold=[0.1]"], "algo.rollout_reject criteria, which are unset"),
        (["algo.rollout_reject=[token_k2,seq_max_k3,seq_sum_k2]", "algo.rollout_reject_threshold=[0.1,0.2]"], "one shared or one each"),
        (["algo.rollout_reject=[token_k2,token_k2]", "algo.rollout_reject_threshold=[0.1]"], "lists a criterion twice"),
        (["algo.rollout_reject=[token_k2]", "algo.rollout_reject_threshold=[0]"], "must be > 0"),
        (["algo.pf_ppo_pow=3"], "algo.pf_ppo=pow, which is unset"),
        (["algo.pf_ppo=pow", "algo.pf_ppo_pow=0"], "set a power > 0"),
        (["algo.entropy_target=1.0"], "setting of algo.adaptive_entropy, which is off"),
        (["algo.adaptive_entropy=true", "algo.entropy_coef=2.0"], "must lie in"),
        (["algo.adaptive_entropy=true", "workers.learners=2"], "workers.learners > 1"),
    ],
)
def test_bad_settings_are_refused(overrides, expected) -> None:
    assert expected in refused(*overrides)


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("algo.top_entropy_quantile=1.5", "top_entropy_quantile"),
        ("algo.rollout_reject=[token_k1]", "rollout_reject"),
        ("algo.pf_ppo=best_of_n", "pf_ppo"),
        ("algo.off_policy_mask_threshold=0", "off_policy_mask_threshold"),
        ("algo.tis_floor=1.5", "tis_floor"),
    ],
)
def test_out_of_range_values_fail_the_schema(override, expected) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_config("default", [override])
