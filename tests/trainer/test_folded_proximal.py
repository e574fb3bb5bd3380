"""Decoupled PPO with the proximal forward folded into the update (one optimizer step per RL step).

With `algo.tis_cap` set and epochs == mini_batches == 1, `prepare_batch` runs no extra learner
forward: the loss takes its own detached log-probs as the proximal ones. Checked against the
explicit two-forward computation (no-grad `learner.logprobs`, `truncated_is_weights`, then the
update) on a deepcopy of the same model: same weights after the step, same TIS metrics.

The behaviour log-probs are made stale by hand: every sampled token's is shifted by +0.5 or -0.5
in turn, so the raw weight exp(proximal - behaviour) is ~exp(-0.5) = 0.607 or ~exp(0.5) = 1.649
(the sampler and the learner have the same weights); with cap 1.5 the second kind is capped, so
tis_capped_frac = the share of -0.5 shifts and tis_weight_mean ~ the matching mix of 0.607 and 1.5.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.losses.importance import truncated_is_weights
from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.learner.batch import collate
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task
from reinforge.trainer.advantage_step import prepare_batch, proximal_forward_folds
from reinforge.learner.policy_objective import make_policy_objective
from float_bounds import assert_adam_steps_agree, forward_bound, gradient_bound, network_sizes

TEXTS = ["1+2=", "35+7=", "123+456=", "9="]
GROUP = 4
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 1.0, 0.2, 0.0, 0.0, 0.0, 1.0]
WEIGHTS = {"correct": 1.0}
CAP, SHIFT = 1.5, 0.5


def algo_config(*overrides: str):
    return load_config("default", [f"algo.tis_cap={CAP}", *overrides]).algo


def fresh_model(tokenizer):
    return build_tiny_llama(tokenizer, "nano", seed=0)


@pytest.fixture(scope="module")
def stale(tokenizer):
    """Trajectories sampled by `fresh_model`, with behaviour log-probs shifted +-SHIFT in turn;
    and the share of sampled tokens shifted by -SHIFT (those whose weight is capped)."""
    engine = TorchEngine(fresh_model(tokenizer).eval(), tokenizer.pad_token_id)
    env = SingleTurnEnv(tokenizer, "raw")
    tasks = [Task(id=f"t{i}", prompt=text, answer="0") for i, text in enumerate(TEXTS)]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))
    out = rollout_groups(engine, env, tasks, GROUP, params, seed=5)
    k = down = 0
    for t, r in zip(out, REWARDS):
        t.rewards = {"correct": r}
        t.reward = r
        for i, sampled in enumerate(t.loss_mask):
            if sampled:
                shift = SHIFT if k % 2 == 0 else -SHIFT
                down += shift < 0
                t.behaviour_logprobs[i] += shift
                k += 1
    assert len({len(t.token_ids) for t in out}) > 1  # ragged: micro-batch trimming is exercised
    return out, down / k


def counting(learner: PolicyLearner) -> list[int]:
    """Count the learner's no-grad forwards (`learner.logprobs` calls)."""
    calls = [0]
    original = learner.logprobs

    def wrapped(batch):
        calls[0] += 1
        return original(batch)

    learner.logprobs = wrapped
    return calls


def max_weight_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize("policy_loss", ["ppo_clip", "gspo"])
@pytest.mark.parametrize("micro_batch_size", [16, 4])  # one micro-batch / gradient accumulation over 4
def test_fold_equals_the_two_forward_update(stale, tokenizer, policy_loss: str, micro_batch_size: int) -> None:
    trajectories, capped_share = stale
    algo = algo_config(f"algo.policy_loss={policy_loss}")
    assert algo.epochs == 1 and algo.mini_batches == 1
    loss_fn = make_policy_objective(algo)
    pad = tokenizer.pad_token_id
    start = fresh_model(tokenizer)

    # Folded: prepare_batch runs no forward; the update computes the weights.
    folded = PolicyLearner(copy.deepcopy(start), lr=1e-3, micro_batch_size=micro_batch_size)
    calls = counting(folded)
    batch, prepare_metrics = prepare_batch(trajectories, algo, get_estimator(algo.advantage), WEIGHTS, pad, folded, None, None)
    assert calls[0] == 0
    assert batch.tis_weights is None and batch.behaviour_logprobs is not None
    assert "tis_weight_mean" not in prepare_metrics and "tis_capped_frac" not in prepare_metrics
    folded_metrics = folded.train_step(batch, loss_fn)

    # By hand: the no-grad proximal forward, capped weights, old_logprobs = proximal, then the update.
    by_hand = PolicyLearner(copy.deepcopy(start), lr=1e-3, micro_batch_size=micro_batch_size)
    explicit = collate(trajectories, None, pad)
    proximal = by_hand.logprobs(explicit)
    explicit.tis_weights, tis_metrics = truncated_is_weights(proximal, explicit.old_logprobs, explicit.loss_mask, CAP)
    explicit.old_logprobs = proximal
    explicit.advantages = batch.advantages  # no ACE: the advantages do not depend on log-probs
    explicit_metrics = by_hand.train_step(explicit, loss_fn)

    # The two paths add in another order (train- vs eval-mode forward, micro-batch widths), so
    # they agree up to float32 noise (tests/float_bounds.py), not bit for bit.
    assert max_weight_diff(start, folded.model) > 1e-4  # the step moved the weights ...
    layers, _ = network_sizes(start)
    tokens = int(explicit.loss_mask.sum())
    for (name, a), b in zip(folded.model.named_parameters(), by_hand.model.parameters()):
        print(f"GRAD {name} ratio {(a.grad - b.grad).abs().max().item() / gradient_bound(a.grad, tokens, layers + 1):.3g}")
        assert (a.grad - b.grad).abs().max().item() <= gradient_bound(a.grad, tokens, layers + 1), name
    assert_adam_steps_agree(start, folded.model, by_hand.model, lr=1e-3)  # ... the same way
    # Proximal log-probs of the two paths differ by forward noise; the TIS weights exp(prox - behav)
    # (<= CAP) and the loss (sum of |A| * weight / tokens) inherit it relative to their size.
    noise = forward_bound(start, scale=proximal[explicit.loss_mask].abs().max().item())
    print("OLDW", max_weight_diff(folded.model, by_hand.model), "TIS", abs(folded_metrics["tis_weight_mean"]-tis_metrics["tis_weight_mean"])/(CAP*noise), "LOSS", abs(folded_metrics["loss"] - explicit_metrics["loss"])/(CAP * batch.advantages.abs().max().item() * noise), "noise", noise)
    assert folded_metrics["tis_weight_mean"] == pytest.approx(tis_metrics["tis_weight_mean"], abs=CAP * noise)
    assert folded_metrics["tis_capped_frac"] == tis_metrics["tis_capped_frac"]  # no weight is near the cap
    assert folded_metrics["loss"] == pytest.approx(explicit_metrics["loss"], abs=CAP * batch.advantages.abs().max().item() * noise)
    # Hand check of the metrics: raw weights ~exp(-SHIFT) (kept) or ~exp(SHIFT) > CAP (capped).
    assert folded_metrics["tis_capped_frac"] == pytest.approx(capped_share, abs=1e-9)
    expected_mean = capped_share * CAP + (1 - capped_share) * torch.exp(torch.tensor(-SHIFT)).item()
    print("OLDW", max_weight_diff(folded.model, by_hand.model), "TIS", abs(folded_metrics["tis_weight_mean"]-tis_metrics["tis_weight_mean"])/(CAP*noise), "LOSS", abs(folded_metrics["loss"] - explicit_metrics["loss"])/(CAP * batch.advantages.abs().max().item() * noise), "noise", noise)
    assert folded_metrics["tis_weight_mean"] == pytest.approx(expected_mean, abs=1e-3)


@pytest.mark.parametrize("case", ["epochs=2", "mini_batches=2", "ace", "dropout"])
def test_fold_is_skipped_unless_one_step_without_ace_or_dropout(stale, tokenizer, case: str) -> None:
    trajectories, capped_share = stale
    model, reference = fresh_model(tokenizer), None
    if case == "ace":
        algo = algo_config("algo.ace_alpha=0.5")  # advantages need the proximal log-probs
        reference = ReferenceModel(fresh_model(tokenizer))
    elif case == "dropout":
        algo = algo_config()
        model.config.attention_dropout = 0.1  # a train-mode forward is not pi_prox
    else:
        algo = algo_config(f"algo.{case}")
    learner = PolicyLearner(model, lr=1e-3)
    assert not proximal_forward_folds(algo, learner)
    calls = counting(learner)
    batch, metrics = prepare_batch(
        trajectories, algo, get_estimator(algo.advantage), WEIGHTS, tokenizer.pad_token_id, learner, reference, None
    )
    assert calls[0] == 1  # the extra forward, as before
    assert batch.behaviour_logprobs is None and batch.tis_weights is not None
    assert metrics["tis_capped_frac"] == pytest.approx(capped_share, abs=1e-9)


def test_select_carries_behaviour_logprobs_and_without_a_cap_the_update_only_measures_the_gap(stale, tokenizer) -> None:
    trajectories, _ = stale
    algo = algo_config()
    learner = PolicyLearner(fresh_model(tokenizer), lr=1e-3)
    assert proximal_forward_folds(algo, learner)
    batch, _ = prepare_batch(trajectories, algo, get_estimator(algo.advantage), WEIGHTS, tokenizer.pad_token_id, learner, None, None)
    rows = torch.tensor([3, 0, 9])
    sub = batch.select(rows)
    width = sub.loss_mask.shape[1]
    assert torch.equal(sub.behaviour_logprobs, batch.behaviour_logprobs[rows, :width])
    # Without a cap the batch still hands the update the behaviour log-probs (the gap metric), and
    # the loss is plain PPO against old_logprobs, which prepare_batch left equal to them: no TIS.
    no_tis = load_config("default", []).algo
    assert no_tis.tis_cap is None and not proximal_forward_folds(algo_config("algo.epochs=2"), learner)
    plain, _ = prepare_batch(trajectories, no_tis, get_estimator(no_tis.advantage), WEIGHTS, tokenizer.pad_token_id, learner, None, None)
    assert plain.behaviour_logprobs is plain.old_logprobs and plain.tis_weights is None
    metrics = learner.train_step(plain, make_policy_objective(no_tis))
    assert "tis_weight_mean" not in metrics
    # the +-SHIFT made by hand, seen by the update's forward: |gap| ~ SHIFT on every sampled token
    assert metrics["logprob_gap/abs_mean"] == pytest.approx(SHIFT, abs=1e-4)
    assert metrics["logprob_gap/ratio_max"] == pytest.approx(math.exp(SHIFT), rel=1e-3)
    assert metrics["logprob_gap/ratio_min"] == pytest.approx(math.exp(-SHIFT), rel=1e-3)
