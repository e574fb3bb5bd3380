"""Each policy loss of issue 28, selected by config, is the one a short run of the tiny model trains
with: its own metric appears in the step's metrics (the default ppo_clip reports none of them)."""

from __future__ import annotations

import pytest

import reinforge

TINY = {
    "model.preset": "nano", "task.train_size": 16, "task.eval_size": 4, "rollout.prompts_per_step": 2,
    "rollout.group_size": 2, "trainer.steps": 2, "eval.samples": 1, "sft.steps": 0, "reward.cache": False,
    "telemetry.progress": False, "telemetry.tensorboard": False, "telemetry.wandb": "off", "algo.epochs": 2,
}


@pytest.mark.parametrize(
    "overrides, metric",
    [
        ({"algo.policy_loss": "sapo"}, "gate_weight_mean"),
        ({"algo.method": "gmpo"}, "seq_ratio_mean"),
        ({"algo.policy_loss": "clip_cov", "algo.clip_cov_ratio": 0.5, "algo.clip_cov_lb": -100.0}, "cov_cut_frac"),
        ({"algo.policy_loss": "kl_cov"}, "kl_cov_frac"),
        ({"algo.policy_loss": "luspo", "algo.loss_agg": "seq_mean_token_sum"}, "seq_ratio_mean"),
        ({"algo.policy_loss": "vespo"}, "phi_mean"),
        ({"algo.policy_loss": "rloo_seq", "algo.loss_agg": "seq_mean_token_mean"}, "seq_ratio_mean"),
    ],
    ids=["sapo", "gmpo", "clip_cov", "kl_cov", "luspo", "vespo", "rloo_seq"],
)
def test_configured_loss_is_the_one_trained(tmp_path, overrides, metric) -> None:
    result = reinforge.train("default", {**TINY, **overrides}, output_dir=tmp_path / "run")
    assert all(metric in step for step in result.steps)
    if metric == "cov_cut_frac":  # every sampled token is a candidate (band from -100): half of them are cut
        assert all(0 < step["cov_cut_frac"] <= 0.5 for step in result.steps)
    if metric == "kl_cov_frac":  # at least one token per micro-batch pays the penalty
        assert all(step["kl_cov_frac"] > 0 for step in result.steps)
