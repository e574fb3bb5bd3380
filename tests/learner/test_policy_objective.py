"""`make_policy_objective`: the composed loss equals its terms computed by hand, and adds up
over micro-batches; `policy_loss_params` maps the config's clip ranges onto every loss."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.losses.aggregation import aggregate
from reinforge.algos.types import LossNormalizer
from reinforge.config import load_config
from reinforge.learner.batch import TrainingBatch
from reinforge.learner.policy_objective import CISPO_DEFAULT_EPS_HIGH, make_policy_objective, policy_loss_params

N, S, V = 4, 8, 11
T = S - 1
LENGTHS = [8, 5, 7, 4]
PROMPT = [3, 2, 4, 1]
AGGS = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant"]


def algo_config(*overrides: str):
    return load_config("default", list(overrides)).algo


def make_batch() -> TrainingBatch:
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, V, (N, S), generator=g)
    attention_mask = torch.zeros(N, S, dtype=torch.long)
    loss_mask = torch.zeros(N, T, dtype=torch.bool)
    for row, (length, prompt) in enumerate(zip(LENGTHS, PROMPT)):
        attention_mask[row, :length] = 1
        loss_mask[row, prompt - 1 : length - 1] = True
    old = torch.log(torch.rand(N, T, generator=g) * 0.8 + 0.1) * loss_mask
    ref = torch.log(torch.rand(N, T, generator=g) * 0.8 + 0.1) * loss_mask
    return TrainingBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        old_logprobs=old,
        advantages=torch.tensor([1.2, -0.7, 0.4, -1.5]),
        ref_logprobs=ref,
    )


def make_logits() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    # large enough that many ratios leave [0.8, 1.2]: the clip is exercised
    return (torch.randn(N, T, V, generator=g) * 1.5).requires_grad_(True)


def logprobs_and_entropy(logits: torch.Tensor, batch: TrainingBatch):
    log_probs = logits.log_softmax(-1)
    chosen = log_probs.gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return chosen, entropy


def normalizer(batch: TrainingBatch) -> LossNormalizer:
    return LossNormalizer(batch.num_loss_tokens, len(batch), T)


def ppo_clip_by_hand(logprobs, batch: TrainingBatch, eps_low=0.2, eps_high=0.2) -> torch.Tensor:
    mask = batch.loss_mask
    ratio = torch.exp(torch.where(mask, logprobs - batch.old_logprobs, torch.zeros_like(logprobs)))
    adv = batch.advantages[:, None]
    objective = torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    return torch.where(mask, -objective, torch.zeros_like(objective))


def k3_by_hand(logprobs, ref) -> torch.Tensor:
    d = ref - logprobs
    return torch.exp(d) - 1 - d


@pytest.mark.parametrize("agg", AGGS)
def test_without_kl_the_objective_is_the_aggregated_ppo_clip(agg) -> None:
    batch, logits = make_batch(), make_logits()
    logprobs, entropy = logprobs_and_entropy(logits, batch)
    algo = algo_config(f"algo.loss_agg={agg}")
    loss, metrics = make_policy_objective(algo)(logprobs, entropy, batch, normalizer(batch))
    expected = aggregate(ppo_clip_by_hand(logprobs, batch), batch.loss_mask, agg, normalizer(batch))
    assert torch.allclose(loss, expected, atol=1e-6)
    assert 0 < metrics["clip_frac"] < 1
    assert "kl_ref" not in metrics


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean"])
def test_clip_higher_reaches_the_loss(agg) -> None:
    batch, logits = make_batch(), make_logits()
    logprobs, entropy = logprobs_and_entropy(logits, batch)
    algo = algo_config(f"algo.loss_agg={agg}", "algo.clip_eps=0.1", "algo.clip_eps_high=0.5")
    loss, _ = make_policy_objective(algo)(logprobs, entropy, batch, normalizer(batch))
    expected = aggregate(ppo_clip_by_hand(logprobs, batch, 0.1, 0.5), batch.loss_mask, agg, normalizer(batch))
    symmetric = aggregate(ppo_clip_by_hand(logprobs, batch, 0.1, 0.1), batch.loss_mask, agg, normalizer(batch))
    assert torch.allclose(loss, expected, atol=1e-6)
    assert not torch.allclose(loss, symmetric, atol=1e-4)


@pytest.mark.parametrize("agg", AGGS)
def test_kl_in_loss_adds_exactly_coef_times_aggregated_k3(agg) -> None:
    batch, logits = make_batch(), make_logits()
    logprobs, entropy = logprobs_and_entropy(logits, batch)
    norm = normalizer(batch)
    base, _ = make_policy_objective(algo_config(f"algo.loss_agg={agg}"))(logprobs, entropy, batch, norm)
    algo = algo_config(f"algo.loss_agg={agg}", "algo.kl_coef=0.5", "algo.kl_estimator=k3")
    loss, metrics = make_policy_objective(algo)(logprobs, entropy, batch, norm)
    kl = k3_by_hand(logprobs, batch.ref_logprobs) * batch.loss_mask
    term = aggregate(kl, batch.loss_mask, agg, norm)
    assert term > 1e-3
    assert torch.allclose(loss - base, 0.5 * term, atol=1e-5)
    assert metrics["kl_ref"] == pytest.approx(kl.sum().item() / batch.num_loss_tokens, rel=1e-5)

    # gradient of the KL term flows into the logits, and only on sampled positions
    (loss - base).backward()
    grad = logits.grad.abs().sum(-1)
    assert grad[batch.loss_mask].min() > 0
    assert torch.equal(grad[~batch.loss_mask], torch.zeros(int((~batch.loss_mask).sum())))

    # with the KL in the reward instead, the loss has no KL term
    in_reward = algo_config(f"algo.loss_agg={agg}", "algo.kl_coef=0.5", "algo.kl_in_reward=true")
    loss_r, metrics_r = make_policy_objective(in_reward)(logprobs, entropy, batch, norm)
    assert torch.allclose(loss_r, base) and "kl_ref" not in metrics_r


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean", "constant"])
def test_entropy_bonus_is_subtracted_and_has_gradient(agg) -> None:
    batch = make_batch()
    norm = normalizer(batch)
    logits_a, logits_b = make_logits(), make_logits()
    lp_a, ent_a = logprobs_and_entropy(logits_a, batch)
    lp_b, ent_b = logprobs_and_entropy(logits_b, batch)
    base, _ = make_policy_objective(algo_config(f"algo.loss_agg={agg}"))(lp_a, ent_a, batch, norm)
    loss, _ = make_policy_objective(algo_config(f"algo.loss_agg={agg}", "algo.entropy_coef=0.01"))(lp_b, ent_b, batch, norm)
    bonus = aggregate(ent_b * batch.loss_mask, batch.loss_mask, agg, norm)
    assert bonus > 0.1
    assert torch.allclose(loss, base - 0.01 * bonus, atol=1e-6)

    base.backward()
    loss.backward()
    # the difference of gradients is exactly the entropy term's gradient
    logits_c = make_logits()
    _, ent_c = logprobs_and_entropy(logits_c, batch)
    (-0.01 * aggregate(ent_c * batch.loss_mask, batch.loss_mask, agg, norm)).backward()
    diff = logits_b.grad - logits_a.grad
    assert diff.abs().max() > 1e-5
    assert torch.allclose(diff, logits_c.grad, atol=1e-7)
    assert torch.equal(diff[~batch.loss_mask], torch.zeros_like(diff[~batch.loss_mask]))


def test_tis_weights_of_the_micro_batch_multiply_the_loss() -> None:
    batch, logits = make_batch(), make_logits()
    g = torch.Generator().manual_seed(2)
    batch.tis_weights = (torch.rand(N, T, generator=g) * 2) * batch.loss_mask
    logprobs, entropy = logprobs_and_entropy(logits, batch)
    loss, _ = make_policy_objective(algo_config())(logprobs, entropy, batch, normalizer(batch))
    expected = aggregate(ppo_clip_by_hand(logprobs, batch) * batch.tis_weights, batch.loss_mask, "token_mean", normalizer(batch))
    assert torch.allclose(loss, expected, atol=1e-6)


def test_policy_loss_params_mapping() -> None:
    algo = algo_config("algo.clip_eps=0.1", "algo.clip_eps_high=0.3", "algo.dual_clip_c=3.0")
    weights = torch.ones(2, 3)
    p = policy_loss_params(algo, weights)
    assert (p.clip_eps_low, p.clip_eps_high) == (0.1, 0.3)
    assert (p.gspo_eps_low, p.gspo_eps_high) == (0.1, 0.3)
    assert p.cispo_eps_high == 0.3
    assert p.dual_clip_c == 3.0
    assert p.tis_weights is weights

    symmetric = policy_loss_params(algo_config("algo.clip_eps=0.15"))
    assert (symmetric.clip_eps_low, symmetric.clip_eps_high) == (0.15, 0.15)
    assert (symmetric.gspo_eps_low, symmetric.gspo_eps_high) == (0.15, 0.15)
    assert symmetric.cispo_eps_high == CISPO_DEFAULT_EPS_HIGH == 5.0
    assert symmetric.dual_clip_c is None and symmetric.tis_weights is None

    gspo = policy_loss_params(algo_config("algo.method=gspo"))
    assert (gspo.gspo_eps_low, gspo.gspo_eps_high) == (3e-4, 4e-4)
    cispo = policy_loss_params(algo_config("algo.method=cispo"))
    assert cispo.cispo_eps_high == 4.0


# gspo is defined under seq_mean_token_mean only
LOSS_AGGS = [(loss, agg) for loss in ("ppo_clip", "cispo") for agg in AGGS] + [("gspo", "seq_mean_token_mean")]


@pytest.mark.parametrize("loss_name, agg", LOSS_AGGS)
def test_micro_batches_add_up_to_the_mini_batch(loss_name, agg) -> None:
    batch = make_batch()
    norm = normalizer(batch)
    algo = algo_config(
        f"algo.loss_agg={agg}", f"algo.policy_loss={loss_name}", "algo.kl_coef=0.5", "algo.entropy_coef=0.01"
    )
    objective = make_policy_objective(algo)

    logits_full = make_logits()
    lp, ent = logprobs_and_entropy(logits_full, batch)
    full, _ = objective(lp, ent, batch, norm)
    full.backward()

    logits_parts = make_logits()
    lp, ent = logprobs_and_entropy(logits_parts, batch)
    total = torch.zeros(())
    for rows in (slice(0, 1), slice(1, N)):  # the second half is trimmed to its own width
        micro = batch.select(rows)
        width = micro.loss_mask.shape[1]
        assert micro.num_loss_tokens < batch.num_loss_tokens
        part, _ = objective(lp[rows, :width], ent[rows, :width], micro, norm)
        total = total + part
    assert batch.select(slice(1, N)).loss_mask.shape[1] < T  # trimming is exercised
    total.backward()
    assert abs(full.item()) > 1e-4
    assert torch.allclose(total, full, atol=1e-6)
    assert torch.allclose(logits_parts.grad, logits_full.grad, atol=1e-7)
