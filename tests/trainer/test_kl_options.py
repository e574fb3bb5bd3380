"""KL options end to end: the bias-corrected KL term against TRL's formula, the adaptive coefficient
in short runs (logged, moving, exact across a resume), and the soft reference update."""

from __future__ import annotations

import pytest
import torch

import reinforge
from reinforge.algos.losses.aggregation import aggregate
from reinforge.algos.types import LossNormalizer
from reinforge.config import load_config
from reinforge.learner.batch import TrainingBatch
from reinforge.learner.policy_objective import make_policy_objective

TINY = {
    "model.preset": "nano", "task.train_size": 16, "task.eval_size": 4, "rollout.prompts_per_step": 2,
    "rollout.group_size": 2, "trainer.steps": 3, "eval.samples": 1, "sft.steps": 0, "reward.cache": False,
    "telemetry.progress": False, "telemetry.tensorboard": False, "telemetry.wandb": "off",
}


@pytest.mark.parametrize("seed", range(4))
def test_bias_corrected_kl_matches_trl(seed: int) -> None:
    # TRL 1.16 GRPOTrainer._compute_loss (token level, beta != 0, use_bias_correction_kl, loss_type "bnpo"):
    #   per_token_kl = exp(ref - logp) - (ref - logp) - 1;  per_token_kl = per_token_kl * coef_1
    #   per_token_loss = ppo_clip_term + beta * per_token_kl;  loss = (per_token_loss * mask).sum() / mask.sum()
    g = torch.Generator().manual_seed(seed)
    n, t = 4, 6
    mask = torch.rand(n, t, generator=g) > 0.3
    old = -2 * torch.rand(n, t, generator=g, dtype=torch.float64)
    ref = old + 0.3 * torch.randn(n, t, generator=g, dtype=torch.float64)
    logprobs = (old + 0.1 * torch.randn(n, t, generator=g, dtype=torch.float64)).requires_grad_(True)
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    batch = TrainingBatch(
        input_ids=torch.zeros(n, t + 1, dtype=torch.long), attention_mask=torch.ones(n, t + 1, dtype=torch.long),
        loss_mask=mask, old_logprobs=old, advantages=adv, ref_logprobs=ref,
    )
    algo = load_config("default", ["algo.kl_coef=0.04", "algo.kl_bias_correction=true"]).algo
    loss, metrics = make_policy_objective(algo)(logprobs, torch.zeros(n, t), batch, LossNormalizer(int(mask.sum()), n, t))
    (grad,) = torch.autograd.grad(loss, logprobs)

    lp = logprobs.detach().clone().requires_grad_(True)
    m = mask.double()
    coef_1 = torch.exp(lp - old)
    a = adv[:, None]
    per_token_loss = -torch.min(coef_1 * a, torch.clamp(coef_1, 0.8, 1.2) * a)
    per_token_kl = (torch.exp(ref - lp) - (ref - lp) - 1) * coef_1
    theirs = ((per_token_loss + 0.04 * per_token_kl) * m).sum() / m.sum()
    (ref_grad,) = torch.autograd.grad(theirs, lp)
    torch.testing.assert_close(loss, theirs, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(grad, ref_grad, atol=1e-12, rtol=1e-10)
    assert metrics["kl_is_ratio_mean"] == pytest.approx((coef_1.detach() * m).sum().item() / m.sum().item())

    # without the correction the KL term is the plain k3: a different gradient, even at these small ratios
    plain = load_config("default", ["algo.kl_coef=0.04"]).algo
    plain_loss, _ = make_policy_objective(plain)(logprobs, torch.zeros(n, t), batch, LossNormalizer(int(mask.sum()), n, t))
    assert not torch.allclose(torch.autograd.grad(plain_loss, logprobs)[0], grad)


ADAPTIVE = {
    **TINY, "algo.kl_coef": 0.05, "algo.kl_ctrl": "adaptive", "algo.kl_target": 1e-6, "algo.kl_horizon": 10,
    "algo.kl_bias_correction": True,
}


def test_adaptive_kl_coefficient_moves_every_step_and_resumes_exactly(tmp_path) -> None:
    # Step 1 samples from the reference itself (KL ~ 0: error -1, clipped to -0.2): x (1 - 0.2 * 4 samples / 10)
    # = 0.92 (the untrained nano model scores 0 everywhere, so the policy stays near the reference after)
    whole = reinforge.train("default", ADAPTIVE, output_dir=tmp_path / "whole")
    coefs = [step["kl_coef"] for step in whole.steps]
    assert coefs[0] == pytest.approx(0.05)
    for before, after, step in zip(coefs, coefs[1:], whole.steps):
        error = min(max(step["kl_ctrl/measured_kl"] / 1e-6 - 1, -0.2), 0.2)
        assert after == pytest.approx(before * (1 + error * 4 / 10), rel=1e-9)
    assert coefs[1] == pytest.approx(0.05 * 0.92)
    assert all("kl_is_ratio_mean" in step for step in whole.steps)  # the bias-corrected KL term was in the loss
    # stopped after step 2 (its checkpoint holds the controller), then resumed to step 3
    reinforge.train("default", {**ADAPTIVE, "trainer.steps": 2, "trainer.checkpoint_every": 1}, output_dir=tmp_path / "cut")
    resumed = reinforge.train(resume=tmp_path / "cut", overrides={"trainer.steps": 3})
    assert resumed.steps[-1]["kl_coef"] == whole.steps[-1]["kl_coef"]
    assert resumed.steps[-1]["kl_ctrl/measured_kl"] == whole.steps[-1]["kl_ctrl/measured_kl"]


def response_length(task, trajectory) -> float:
    """A reward that differs within groups, so the untrained policy moves."""
    return float(len(trajectory.response_text))


def test_soft_reference_update_mixes_the_policy_in(tmp_path) -> None:
    run = tmp_path / "run"
    overrides = {**TINY, "trainer.steps": 2, "trainer.checkpoint_every": 1, "algo.kl_coef": 0.01, "algo.ref_reset_every": 1, "algo.ref_mixup_alpha": 0.25, "reward.isolation": "thread"}
    reinforge.train("default", overrides, output_dir=run, reward_fns=[response_length])
    from safetensors.torch import load_file

    states = [torch.load(run / "checkpoints" / f"step_00000{s}" / "state.pt", weights_only=False) for s in (1, 2)]
    policy2 = load_file(run / "checkpoints" / "step_000002" / "model" / "model.safetensors")
    ref1, ref2 = states[0]["reference"], states[1]["reference"]
    moved = 0
    for name, value in policy2.items():
        if name not in ref2:
            continue
        expected = 0.25 * value + 0.75 * ref1[name]
        torch.testing.assert_close(ref2[name], expected, atol=1e-6, rtol=1e-5)
        moved += int(not torch.equal(ref2[name], ref1[name]))
    assert moved > 0  # the reference did move toward the policy
