"""The policy objective with token selection, off-policy masking and the adaptive entropy
coefficient equals TRL 1.16's GRPOTrainer._compute_loss (loss_type bnpo = token_mean, one
micro-batch per optimizer step), loss values and gradients, on random batches."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "algos"))  # the reference/ helpers live there

from reference.trl_grpo import TRLGRPOLoss  # noqa: E402
from reinforge.algos.types import LossNormalizer  # noqa: E402
from reinforge.config import load_config  # noqa: E402
from reinforge.learner.batch import TrainingBatch  # noqa: E402
from reinforge.learner.policy_objective import adaptive_entropy_coef, make_policy_objective  # noqa: E402

N, T, V = 6, 9, 13


def algo_config(*overrides: str):
    return load_config("default", list(overrides)).algo


def random_step(seed: int):
    """Logits (the forward's output), a ragged, gapped mask with an empty row, advantages, and
    engine log-probs drifted away from the policy."""
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(N, T, V, generator=g, dtype=torch.float64) * 1.5).requires_grad_(True)
    tokens = torch.randint(0, V, (N, T), generator=g)
    mask = torch.rand(N, T, generator=g) < 0.8
    mask &= torch.arange(T)[None, :] < torch.randint(2, T + 1, (N,), generator=g)[:, None]
    mask[0] = False
    advantages = torch.randn(N, generator=g, dtype=torch.float64)
    with torch.no_grad():
        chosen = logits.log_softmax(-1).gather(-1, tokens[..., None]).squeeze(-1)
    engine = chosen + torch.randn(N, T, generator=g, dtype=torch.float64) * 0.4
    return logits, tokens, mask, advantages, engine


def forward(logits, tokens):
    log_p = logits.log_softmax(-1)
    return log_p.gather(-1, tokens[..., None]).squeeze(-1), -(log_p.exp() * log_p).sum(-1)


def ours(algo, logits, tokens, mask, advantages, old, engine=None, control=None):
    logprobs, entropy = forward(logits, tokens)
    batch = TrainingBatch(
        input_ids=torch.zeros(N, T + 1, dtype=torch.long), attention_mask=torch.ones(N, T + 1, dtype=torch.long),
        loss_mask=mask, old_logprobs=old, advantages=advantages, engine_logprobs=engine,
    )
    loss, metrics = make_policy_objective(algo, control)(logprobs, entropy, batch, LossNormalizer(int(mask.sum()), N, T))
    (grad,) = torch.autograd.grad(loss, logits)
    return loss.detach(), grad, metrics


def trl(reference, logits, tokens, mask, advantages, old, sampling=None):
    logprobs, entropy = forward(logits, tokens)
    loss = reference.loss(logprobs, entropy, mask, advantages, old, sampling)
    (grad,) = torch.autograd.grad(loss, logits)
    return loss.detach(), grad


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("rho", "delta"), [(0.2, None), (1.0, 0.1), (0.3, 0.1), (0.0, 0.3)])
def test_selection_matches_trl(seed, rho, delta) -> None:
    logits, tokens, mask, advantages, engine = random_step(seed)
    keys = [f"algo.top_entropy_quantile={rho}"] + ([f"algo.off_policy_mask_threshold={delta}"] if delta else [])
    loss, grad, metrics = ours(algo_config(*keys), logits, tokens, mask, advantages, engine)
    expected_loss, expected_grad = trl(TRLGRPOLoss(rho, delta), logits, tokens, mask, advantages, engine)
    torch.testing.assert_close(loss, expected_loss)
    torch.testing.assert_close(grad, expected_grad)
    if rho < 1:
        assert metrics["mask/top_entropy_dropped_frac"] > 0
    if delta is not None:
        assert "mask/off_policy_dropped_frac" in metrics


def test_the_random_steps_drop_sequences() -> None:
    # Guard against a vacuous comparison above: the off-policy mask removes something in these cases.
    dropped = []
    for seed in range(8):
        logits, tokens, mask, advantages, engine = random_step(seed)
        dropped.append(ours(algo_config("algo.off_policy_mask_threshold=0.1"), logits, tokens, mask, advantages, engine)[2]["mask/off_policy_dropped_frac"])
    assert max(dropped) > 0 and min(dropped) < 1


@pytest.mark.parametrize("seed", range(4))
def test_off_policy_mask_reads_the_engine_log_probs_when_old_ones_are_proximal(seed) -> None:
    # Decoupled PPO without the fold: old_logprobs are the learner's (proximal), the engine's are kept aside.
    logits, tokens, mask, advantages, engine = random_step(seed)
    proximal = forward(logits, tokens)[0].detach() + 0.05
    algo = algo_config("algo.off_policy_mask_threshold=0.05")
    loss, grad, _ = ours(algo, logits, tokens, mask, advantages, proximal, engine=engine)
    expected_loss, expected_grad = trl(TRLGRPOLoss(off_policy_mask_threshold=0.05), logits, tokens, mask, advantages, proximal, engine)
    torch.testing.assert_close(loss, expected_loss)
    torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("rho", [1.0, 0.5])
def test_adaptive_entropy_matches_trl_over_steps(rho) -> None:
    # target 2.0 nats sits inside the entropies of these logits, so the coefficient goes up and down.
    keys = ["algo.adaptive_entropy=true", "algo.entropy_target=2.0", "algo.entropy_coef_delta=0.05", f"algo.top_entropy_quantile={rho}"]
    algo = algo_config(*keys)
    control = adaptive_entropy_coef(algo)
    reference = TRLGRPOLoss(rho, entropy_coef=0.0, use_adaptive_entropy=True, entropy_target=2.0, entropy_coef_delta=0.05)
    coefs, applied = [], []
    for step in range(8):
        logits, tokens, mask, advantages, engine = random_step(step)
        # sharper logits (lower entropy) for a few steps, then flatter ones: the coefficient rises, then falls
        logits = (logits.detach() * (0.4, 0.4, 1.8, 1.8, 1.8, 0.3, 0.3, 1.8)[step]).requires_grad_(True)
        applied.append(control.applied())
        loss, grad, _ = ours(algo, logits, tokens, mask, advantages, engine, control=control)
        expected_loss, expected_grad = trl(reference, logits, tokens, mask, advantages, engine)
        control.end_step()
        assert control.coef == pytest.approx(reference.entropy_coef, abs=1e-12)
        assert control.last_entropy == pytest.approx(reference._last_world_entropy)
        if rho == 1.0:  # with a token subset, TRL divides the bonus by the subset's count (the module's docstring)
            torch.testing.assert_close(loss, expected_loss)
            torch.testing.assert_close(grad, expected_grad)
        coefs.append(control.coef)
    assert max(coefs) > 0 and any(b < a for a, b in zip(coefs, coefs[1:])) and any(a > 0 for a in applied)
