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


def test_sapo_gmpo_and_the_covariance_presets_follow_their_papers_recipes() -> None:
    cfg = algo("algo.method=sapo")
    assert (cfg.policy_loss, cfg.loss_agg, cfg.sapo_tau_pos, cfg.sapo_tau_neg) == ("sapo", "seq_mean_token_mean", 1.0, 1.05)
    cfg = algo("algo.method=gmpo")
    assert (cfg.policy_loss, cfg.loss_agg, cfg.clip_eps, cfg.clip_eps_high) == ("gmpo", "seq_mean_token_mean", 0.4, 0.4)
    cfg = algo("algo.method=clip_cov")
    assert (cfg.policy_loss, cfg.clip_eps, cfg.clip_eps_high, cfg.clip_cov_ratio, cfg.clip_cov_lb, cfg.clip_cov_ub) == (
        "clip_cov", 1.0, 1.0, 2e-4, 1.0, 5.0,
    )
    assert cfg.dynamic_sampling and cfg.loss_agg == "token_mean"
    cfg = algo("algo.method=kl_cov")
    assert (cfg.policy_loss, cfg.kl_cov_ratio, cfg.kl_cov_coef, cfg.dynamic_sampling) == ("kl_cov", 2e-3, 1.0, True)
