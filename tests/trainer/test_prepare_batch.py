"""`prepare_batch`: from scored trajectories to advantages, checked against independent math.

A small batch (4 tasks x 4 samples) is rolled out with the nano engine and given hand-set
rewards. Reference log-probs are recomputed here one trajectory at a time, without padding,
straight from the reference model's logits, so the padded batch code path is checked against
a separate computation.

Tolerances are derived, not picked (tests/float_bounds.py): advantages are computed in float64 and
stored as float32, so arithmetic-only checks allow float32 rounding of the result (EPS32 * |a|);
checks that go through a forward allow what its summation order can change (logit_bound), carried
through the estimator's formula (`normalized_bound`).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from float_bounds import EPS32, SLACK, logit_bound
from reinforge.algos.advantages import get_estimator, group_normalized_advantages
from reinforge.algos.types import AdvantageInputs
from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.learner.batch import collate
from reinforge.learner.critic_learner import CriticLearner
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.models.value_model import ValueModel
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task
from reinforge.trainer.advantage_step import prepare_batch

TEXTS = ["1+2=", "35+7=", "123+456=", "9="]
GROUP = 4
# group 1 has zero variance; the others mix ties and distinct values
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0, 1.0, 0.2, 0.0, 0.0, 0.0, 1.0]
WEIGHTS = {"correct": 1.0}


def algo_config(*overrides: str):
    return load_config("default", list(overrides)).algo


def perturbed(model: torch.nn.Module, std: float = 0.1, seed: int = 1) -> torch.nn.Module:
    other = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * std)
    return other.eval()


@pytest.fixture(scope="module")
def trajectories(tokenizer, nano_model):
    engine = TorchEngine(nano_model, tokenizer.pad_token_id)
    env = SingleTurnEnv(tokenizer, "raw")
    tasks = [Task(id=f"t{i}", prompt=text, answer="0") for i, text in enumerate(TEXTS)]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))
    out = rollout_groups(engine, env, tasks, GROUP, params, seed=5)
    for t, r in zip(out, REWARDS):
        t.rewards = {"correct": r}
        t.reward = r
    assert len({len(t.token_ids) for t in out}) > 1  # ragged: right padding is exercised
    return out


@pytest.fixture(scope="module")
def ref_model(nano_model):
    return perturbed(nano_model)


@pytest.fixture(scope="module")
def learner(nano_model):
    return PolicyLearner(nano_model, lr=1e-3)  # only its no-grad log-probs are used: no update


@torch.no_grad()
def sampled_logprobs(model, trajectory) -> torch.Tensor:
    """log p(token_i | tokens_<i) of each sampled token of one unpadded trajectory, float64."""
    ids = torch.tensor(trajectory.token_ids)[None]
    logits = model(input_ids=ids).logits[0, :-1].double()
    chosen = logits.log_softmax(-1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return chosen[trajectory.prompt_length - 1 :]


def behaviour(trajectory) -> torch.Tensor:
    return torch.tensor(trajectory.behaviour_logprobs[trajectory.prompt_length :], dtype=torch.float64)


def grpo(rewards, trajectories) -> torch.Tensor:
    mask = torch.ones(len(trajectories), 1, dtype=torch.bool)
    group_ids = torch.tensor([t.group_id for t in trajectories])
    return group_normalized_advantages(AdvantageInputs(torch.as_tensor(rewards, dtype=torch.float64), group_ids, mask)).advantages


def stored(expected: torch.Tensor) -> torch.Tensor:
    """A float64 result stored as float32: off by at most half an ulp, <= EPS32 * |x|."""
    return EPS32 * expected.double().abs()


def assert_within(actual: torch.Tensor, expected: torch.Tensor, bound: torch.Tensor | float) -> None:
    excess = ((actual.double() - expected.double()).abs() - bound).max().item()
    assert excess <= 0, f"differs by {excess:.3g} more than the derived bound"


def normalized_bound(advantages: torch.Tensor, values: torch.Tensor, groups: torch.Tensor, error: torch.Tensor) -> torch.Tensor:
    """Bound on the change of a = (x - mean_g) / (std_g + 1e-6) when each x moves by at most
    `error` (d): the group mean moves by at most max|d|; the std, a norm of the centred values
    over sqrt(n - 1) (or sqrt(n)), by at most ||d|| / sqrt(n - 1) <= sqrt(n / (n - 1)) max|d|
    <= 2 max|d| (n >= 2; triangle inequality). To first order, with the std in the denominator,
        |da| <= (|dx| + max|d| + 2 |a| max|d|) / (std_g + 1e-6)   (+ float32 storage of a);
    the second-order term is (max|d| / std)^2 relative, negligible for max|d| << std."""
    bound = torch.zeros_like(advantages, dtype=torch.float64)
    for g in groups.unique():
        rows = groups == g
        worst = error[rows].max()
        std = values[rows].double().std()
        bound[rows] = (error[rows] + worst + 2 * advantages[rows].double().abs() * worst) / (std + 1e-6)
    return bound + stored(advantages)


def ref_noise(model, trajectories) -> float:
    """How far one reference log-prob may move between the padded batch and one unpadded row."""
    return logit_bound(model, [t.token_ids for t in trajectories])


def run(trajectories, algo, learner, pad, reference=None, critic=None):
    return prepare_batch(trajectories, algo, get_estimator(algo.advantage), WEIGHTS, pad, learner, reference, critic)


def test_plain_grpo(trajectories, learner, tokenizer) -> None:
    batch, metrics = run(trajectories, algo_config(), learner, tokenizer.pad_token_id)
    expected = grpo(REWARDS, trajectories)
    assert_within(batch.advantages, expected, stored(expected))
    # by hand: group 0 = [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3)
    a = 0.5 / (3**-0.5 + 1e-6)
    by_hand = torch.tensor([a, -a, -a, a], dtype=torch.float64)
    assert_within(batch.advantages[:4], by_hand, stored(by_hand))
    assert torch.equal(batch.advantages[4:8], torch.zeros(4))  # zero-variance group
    assert metrics["zero_variance_group_frac"] == 0.25
    # nothing the config did not ask for
    assert batch.ref_logprobs is None and batch.tis_weights is None and batch.old_values is None
    assert batch.returns is None
    assert torch.equal(batch.old_logprobs, collate(trajectories, None, tokenizer.pad_token_id).old_logprobs)


def test_kl_in_reward_k1(trajectories, learner, ref_model, tokenizer) -> None:
    algo = algo_config("algo.kl_coef=0.1", "algo.kl_in_reward=true", "algo.kl_estimator=k1")
    batch, metrics = run(trajectories, algo, learner, tokenizer.pad_token_id, ReferenceModel(ref_model))

    k1_sums = torch.stack([(behaviour(t) - sampled_logprobs(ref_model, t)).sum() for t in trajectories])
    assert k1_sums.abs().max() > 0.05  # the reference really differs from the policy
    rewards = torch.tensor(REWARDS, dtype=torch.float64) - 0.1 * k1_sums
    expected = grpo(rewards, trajectories)
    noise = ref_noise(ref_model, trajectories)
    tokens_per_row = torch.tensor([t.num_sampled_tokens for t in trajectories], dtype=torch.float64)
    bound = normalized_bound(expected, rewards, torch.tensor([t.group_id for t in trajectories]), 0.1 * tokens_per_row * noise)
    assert_within(batch.advantages, expected, bound)
    assert ((expected - grpo(REWARDS, trajectories)).abs() > 100 * bound).any()  # the KL moved them, far beyond the bound
    assert batch.advantages[4:8].abs().max() > 0.1  # the constant group now has a signal

    # the reference log-probs on the batch are the reference's, on the sampled tokens
    for row, t in enumerate(trajectories):
        ref_row = batch.ref_logprobs[row][batch.loss_mask[row]].double()
        exact = sampled_logprobs(ref_model, t)
        assert_within(ref_row, exact, noise + stored(exact))
    tokens = sum(t.num_sampled_tokens for t in trajectories)
    # a mean of per-token k1 values, each within the reference's noise, summed in float32
    rounding = SLACK * tokens**0.5 * EPS32 * max(k.abs().max().item() for k in [behaviour(t) - sampled_logprobs(ref_model, t) for t in trajectories])
    assert metrics["kl_ref"] == pytest.approx(k1_sums.sum().item() / tokens, abs=noise + rounding)


def test_reinforce_pp_preset_folds_the_k1_kl_into_the_reward(trajectories, learner, ref_model, tokenizer) -> None:
    # The preset alone (no KL keys given) must do what methods.py says: the paper's per-token k1 KL,
    # paid as reward, inside returns-to-go that are whitened over every sampled token of the batch.
    algo = algo_config("algo.method=reinforce_pp")
    assert (algo.kl_in_reward, algo.kl_estimator) == (True, "k1") and algo.kl_coef > 0
    batch, metrics = run(trajectories, algo, learner, tokenizer.pad_token_id, ReferenceModel(ref_model))
    assert "kl_ref" in metrics

    # Independently, one unpadded trajectory at a time: G_t = r + sum_{s >= t} -coef * KL_s.
    returns = []
    for t, r in zip(trajectories, REWARDS):
        k1 = behaviour(t) - sampled_logprobs(ref_model, t)
        returns.append(r - algo.kl_coef * k1.flip(0).cumsum(0).flip(0))
    flat = torch.cat(returns)
    mean, std = flat.mean(), flat.std(correction=0)
    noise = ref_noise(ref_model, trajectories)
    expected = torch.cat([(g - mean) / (std + 1e-6) for g in returns])
    # G_t sums at most the row's tokens of k1 values, each within the reference's noise
    error = torch.cat([torch.full_like(g, algo.kl_coef * len(g) * noise) for g in returns])
    bound = normalized_bound(expected, flat, torch.zeros(len(flat), dtype=torch.long), error)
    assert_within(batch.advantages[batch.loss_mask], expected, bound)
    without_kl = torch.cat([(REWARDS[row] - mean) / (std + 1e-6) * torch.ones_like(g) for row, g in enumerate(returns)])
    assert ((expected - without_kl).abs() > 10 * bound).any()  # the KL visibly reaches the advantages
    assert torch.equal(batch.advantages[~batch.loss_mask], torch.zeros(int((~batch.loss_mask).sum())))


def test_truncated_importance_weights_sync(trajectories, learner, tokenizer) -> None:
    # epochs=2: the proximal forward runs here (with one optimizer step it is folded into the
    # update instead: tests/trainer/test_folded_proximal.py)
    algo = algo_config("algo.tis_cap=2.0", "algo.epochs=2")
    batch, metrics = run(trajectories, algo, learner, tokenizer.pad_token_id)
    mask = batch.loss_mask
    # exp(proximal - behaviour): two forwards of the same weights (batched recompute vs the
    # engine's cached decode), each within the model's noise of the exact log-prob
    noise = ref_noise(learner.model, trajectories)
    assert_within(batch.tis_weights[mask], torch.ones(int(mask.sum())), math.expm1(2 * noise) + 2 * EPS32)
    assert torch.equal(batch.tis_weights[~mask], torch.zeros(int((~mask).sum())))
    recomputed = learner.logprobs(collate(trajectories, None, tokenizer.pad_token_id))
    assert torch.equal(batch.old_logprobs, recomputed)
    assert metrics["tis_weight_mean"] == pytest.approx(1.0, abs=math.expm1(2 * noise) + 2 * EPS32)
    assert metrics["tis_capped_frac"] == 0.0


def test_truncated_importance_weights_stale(trajectories, ref_model, tokenizer) -> None:
    """A learner whose weights differ from the sampler's: old_logprobs become the learner's, and
    the weights are min(exp(proximal - behaviour), cap)."""
    stale_learner = PolicyLearner(ref_model, lr=1e-3)
    algo = algo_config("algo.tis_cap=2.0", "algo.epochs=2")  # not folded, as above
    batch, _ = run(trajectories, algo, stale_learner, tokenizer.pad_token_id)
    mask = batch.loss_mask
    behaviour_padded = collate(trajectories, None, tokenizer.pad_token_id).old_logprobs
    proximal = stale_learner.logprobs(collate(trajectories, None, tokenizer.pad_token_id))
    assert torch.equal(batch.old_logprobs, proximal)
    assert (batch.old_logprobs - behaviour_padded)[mask].abs().max() > 0.01
    expected = torch.exp(proximal - behaviour_padded).clamp(max=2.0) * mask
    # the same float32 inputs through exp and clamp: at most a few ulps (another exp kernel)
    assert_within(batch.tis_weights, expected, 4 * EPS32 * expected.double().abs())
    assert (batch.tis_weights[mask] < 0.99).any()


@pytest.mark.parametrize("shape", ["relu", "softplus"])
def test_ace_scales_negative_advantages(trajectories, learner, ref_model, tokenizer, shape) -> None:
    algo = algo_config("algo.ace_alpha=1.0", f"algo.ace_shape={shape}")
    batch, _ = run(trajectories, algo, learner, tokenizer.pad_token_id, ReferenceModel(ref_model))
    base = grpo(REWARDS, trajectories).double()
    confidence = torch.stack([(behaviour(t) - sampled_logprobs(ref_model, t)).sum() for t in trajectories])
    lift = confidence.clamp(min=0) if shape == "relu" else torch.nn.functional.softplus(confidence)
    expected = torch.where(base < 0, base * (1.0 + lift), base)
    # the confidence sums the row's tokens of (behaviour - reference); relu and softplus have slope <= 1
    tokens_per_row = torch.tensor([t.num_sampled_tokens for t in trajectories], dtype=torch.float64)
    bound = base.abs() * tokens_per_row * ref_noise(ref_model, trajectories) + stored(expected)
    assert_within(batch.advantages, expected, bound)
    negative = base < 0
    assert torch.equal(batch.advantages[base >= 0], base[base >= 0].float())  # untouched
    # the test means something: some negatives are scaled up, some are not (confidence <= 0)
    assert (negative & (confidence > 0.05)).any()
    assert (negative & (confidence < 0)).any()
    if shape == "relu":  # errors no surer than the reference keep their advantage exactly
        assert torch.equal(batch.advantages[negative & (confidence < 0)], base[negative & (confidence < 0)].float())


def test_positive_weight(trajectories, learner, tokenizer) -> None:
    batch, _ = run(trajectories, algo_config("algo.positive_weight=0.1"), learner, tokenizer.pad_token_id)
    base = grpo(REWARDS, trajectories)
    expected = torch.where(base > 0, 0.1 * base, base)
    assert (base > 0).any() and (base < 0).any()
    assert_within(batch.advantages, expected, stored(expected))


def test_ppo_with_a_critic(trajectories, learner, nano_model, tokenizer) -> None:
    algo = algo_config("algo.method=ppo")
    assert algo.advantage == "gae"
    critic = CriticLearner(ValueModel.from_policy(nano_model), lr=1e-4)
    batch, metrics = run(trajectories, algo, learner, tokenizer.pad_token_id, critic=critic)
    mask = batch.loss_mask
    assert batch.advantages.shape == mask.shape
    assert torch.equal(batch.advantages[~mask], torch.zeros(int((~mask).sum())))
    assert batch.advantages[mask].abs().max() > 0.1
    # whitened over sampled tokens (in float64, then stored as float32): the mean is 0 up to the
    # storage rounding and the float32 mean's own summation
    whitened = batch.advantages[mask]
    n = len(whitened)
    assert whitened.mean().abs().item() <= (1 + SLACK * n**0.5) * EPS32 * whitened.abs().max().item()
    assert batch.old_values is not None and batch.old_values.shape == mask.shape
    assert batch.returns is not None and batch.returns.shape == mask.shape
    assert torch.equal(batch.returns[~mask], torch.zeros(int((~mask).sum())))
    # The value head starts at zero, so V = 0 and the return at each row's last sampled token is
    # its reward (gamma = 1).
    assert torch.equal(batch.old_values, torch.zeros_like(batch.old_values))
    last = [int(mask[row].nonzero().max()) for row in range(len(trajectories))]
    rewards = torch.tensor(REWARDS, dtype=torch.float64)
    assert_within(batch.returns[torch.arange(len(trajectories)), last], rewards, stored(rewards))
    assert "returns_mean" in metrics


def test_ppo_kl_in_reward_goes_per_token(trajectories, learner, ref_model, nano_model, tokenizer) -> None:
    """With a critic the KL is paid token by token: returns = reward-to-go of -beta * k1 + r."""
    algo = algo_config("algo.method=ppo", "algo.lam=1.0", "algo.kl_coef=0.1", "algo.kl_in_reward=true", "algo.kl_estimator=k1")
    critic = CriticLearner(ValueModel.from_policy(nano_model), lr=1e-4)
    batch, _ = run(trajectories, algo, learner, tokenizer.pad_token_id, ReferenceModel(ref_model), critic)
    noise = ref_noise(ref_model, trajectories)
    for row, t in enumerate(trajectories):
        k1 = behaviour(t) - sampled_logprobs(ref_model, t)
        step = -0.1 * k1
        step[-1] += REWARDS[row]
        to_go = step.flip(0).cumsum(0).flip(0)
        # each return sums at most the row's tokens of -0.1 * k1, each within the reference's noise
        assert_within(batch.returns[row][batch.loss_mask[row]], to_go, 0.1 * len(to_go) * noise + stored(to_go))


def test_reinforce_pp_takes_the_kl_as_a_per_token_reward(trajectories, learner, ref_model, tokenizer) -> None:
    # REINFORCE++ pays the KL token by token, so its advantages are per token, not per sample.
    algo = algo_config("algo.method=reinforce_pp", "algo.kl_coef=0.1", "algo.kl_in_reward=true", "algo.kl_estimator=k1")
    batch, _ = run(trajectories, algo, learner, tokenizer.pad_token_id, ReferenceModel(ref_model))
    assert batch.advantages.shape == batch.loss_mask.shape
    assert torch.equal(batch.advantages[~batch.loss_mask], torch.zeros(int((~batch.loss_mask).sum())))
    # Within a sample, the return-to-go differs from token to token by the KL paid along the way.
    first = batch.advantages[0][batch.loss_mask[0]]
    assert first.unique().numel() > 1
