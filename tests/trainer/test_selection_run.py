"""Token selection, masking and re-weighting in real runs of the tiny model: each option takes
effect (its metric moves, the truncated rows leave the loss), and a run with the adaptive entropy
coefficient and PF-PPO's draws resumes from a checkpoint to the same weights and metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.config import load_config
from reinforge.rollout.trajectory import single_turn_trajectory
from reinforge.run.pipeline import run_training
from reinforge.trainer.advantage_step import prepare_batch
from run_records import assert_same_run, copy_at_first_checkpoint

BASE = [
    "model.preset=nano", "task.train_size=40", "task.eval_size=4", "eval.every=100", "eval.samples=1",
    "rollout.prompts_per_step=2", "rollout.group_size=4", "trainer.steps=4", "telemetry.progress=false",
    "telemetry.tensorboard=false",
]
OPTIONS = [
    "sft.steps=150", "sft.lr=0.003", "rollout.max_new_tokens=6", "algo.mini_batches=2", "algo.epochs=2",
    "algo.top_entropy_quantile=0.5", "algo.off_policy_mask_threshold=1e-9",
    "algo.adaptive_entropy=true", "algo.entropy_target=100", "algo.entropy_coef_delta=0.01",
    "algo.pf_ppo=max_random", "algo.tis_cap=2.0", "algo.tis_floor=0.5", "algo.tis_normalize=true",
    "rollout.engine_dtype=bfloat16", "algo.rollout_reject=[token_k3]", "algo.rollout_reject_threshold=[1e-6]",
]


def test_every_option_takes_effect_and_the_run_resumes_exactly(tmp_path: Path) -> None:
    full = tmp_path / "full"
    outcome = run_training(load_config("default", [*BASE, *OPTIONS, "trainer.checkpoint_every=2", f"trainer.output_dir={full}"]))
    steps = outcome.rl.steps
    # entropy_target 100 nats is above any entropy: the coefficient rises by 0.01 at each of the
    # 2 x 2 optimizer steps of a step (epochs x mini_batches), from algo.entropy_coef = 0
    assert [s["entropy_coef"] for s in steps] == pytest.approx([0.04, 0.08, 0.12, 0.16])
    assert all(0 < s["mask/top_entropy_dropped_frac"] < 1 for s in steps if s["entropy"] > 0)
    assert any(s["mask/off_policy_dropped_frac"] > 0 for s in steps)  # stale negatives of the second epoch
    assert all(0 < s["mask/pf_ppo_dropped_frac"] < 1 for s in steps)
    assert any(s["mask/rollout_reject_frac"] > 0 for s in steps)  # the bfloat16 engine's gap
    assert all(s["tis_norm_factor"] > 0 and "tis_floored_frac" in s for s in steps)
    # Resumed from the step-2 checkpoint: the coefficient and PF-PPO's generator come back with it.
    copy = tmp_path / "copy"
    run_training(load_config(str(copy_at_first_checkpoint(full, copy))), resume=True)
    assert_same_run(full, copy)


def test_truncated_samples_leave_the_loss_in_a_run(tmp_path: Path) -> None:
    # An untrained nano model rarely stops within 3 tokens: most samples are cut there.
    outcome = run_training(load_config("default", [
        *BASE, "sft.steps=0", "rollout.max_new_tokens=3", "algo.mask_truncated=true", "trainer.steps=2",
        "trainer.checkpoint_every=0", f"trainer.output_dir={tmp_path / 'run'}",
    ]))
    assert all(s["mask/truncated_frac"] > 0 for s in outcome.rl.steps)


def test_prepare_batch_masks_exactly_the_truncated_rows() -> None:
    trajectories = []
    for i, finish in enumerate(["stop", "length", "max_tokens", "stop"]):
        t = single_turn_trajectory("t", [1, 2], [3, 4, 5], [-0.1, -0.2, -0.3], "x", finish, group_id=0)
        t.reward = float(i % 2)
        trajectories.append(t)
    algo = load_config("default", ["algo.mask_truncated=true"]).algo
    batch, metrics = prepare_batch(trajectories, algo, get_estimator("grpo"), {}, 0, None, None, None)
    assert batch.loss_mask.any(1).tolist() == [True, False, False, True]
    assert metrics["mask/truncated_frac"] == pytest.approx(0.5)
    # their rewards still count in the group's baseline: rewards 0, 1, 0, 1, mean 0.5, std sqrt(1 / 3)
    expected = torch.tensor([-0.5, 0.5, -0.5, 0.5]) / (1 / 3) ** 0.5
    torch.testing.assert_close(batch.advantages, expected, atol=1e-5, rtol=1e-5)
