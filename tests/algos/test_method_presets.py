"""Method presets set what their comments in reinforge/algos/methods.py say, and yield to the user.

What the REINFORCE++ preset computes with those keys is checked against an independent computation
in tests/trainer/test_prepare_batch.py (test_reinforce_pp_preset_folds_the_k1_kl_into_the_reward).
"""

from __future__ import annotations

from reinforge.config import load_config


def algo(*overrides: str):
    return load_config("default", list(overrides)).algo


def test_reinforce_pp_folds_a_k1_kl_into_the_reward() -> None:
    # The default recipe sets kl_coef: 0.0; a method named on the command line overrides it.
    assert algo().kl_coef == 0.0
    cfg = algo("algo.method=reinforce_pp")
    assert cfg.advantage == "reinforce_pp"
    assert cfg.kl_in_reward is True and cfg.kl_estimator == "k1"
    assert cfg.kl_coef == 0.01  # OpenRLHF's default --algo.kl.init_coef


def test_reinforce_pp_baseline_keeps_the_kl_in_the_loss_like_its_reference_scripts() -> None:
    cfg = algo("algo.method=reinforce_pp_baseline")
    assert cfg.advantage == "reinforce_pp_baseline"
    assert cfg.kl_in_reward is False and cfg.kl_estimator == "k2" and cfg.kl_coef == 1e-5


def test_keys_the_user_sets_win_over_the_preset() -> None:
    cfg = algo("algo.method=reinforce_pp", "algo.kl_coef=0.05", "algo.kl_estimator=k2")
    assert (cfg.kl_coef, cfg.kl_estimator, cfg.kl_in_reward) == (0.05, "k2", True)
