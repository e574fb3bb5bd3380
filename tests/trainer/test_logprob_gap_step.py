"""The engine's log-prob gap, measured every step by prepare_batch / the update, on real rollouts.

A float32 TorchEngine on the learner's own weights is exact: the measured gap is float32 noise
(the engine's KV-cached decoder adds in another order than the learner's full forward). Shifting
the engine's log-probs by hand moves the metric by exactly that shift. bf16 (a bfloat16 engine
copy, or the learner under bf16 autocast) shows a gap far above the noise, and the update runs.
Rollout masking removes exactly the samples whose sequence ratio was pushed out of the band.
"""

from __future__ import annotations

import copy
import math

import pytest

from reinforge.algos.advantages import get_estimator
from reinforge.algos.logprob_gap import GAP_WARNING_THRESHOLD
from reinforge.algos.losses.rollout_correction import rollout_is_weights
from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task
from reinforge.trainer.advantage_step import prepare_batch
from reinforge.learner.policy_objective import make_policy_objective

TEXTS = ["1+2=", "35+7=", "123+456=", "9="]
GROUP = 4
WEIGHTS = {"correct": 1.0}
# float32 forward noise of the nano model (measured: mean 1.2e-7, max 4.8e-7), with room for other
# CPUs' kernels; far below any real gap (bf16: ~1e-3 here)
NOISE = 1e-5


def start_model(tokenizer):
    return build_tiny_llama(tokenizer, "nano", seed=0)


def sample(tokenizer, engine_dtype: str = "float32"):
    engine = TorchEngine(start_model(tokenizer).eval(), tokenizer.pad_token_id, dtype=engine_dtype)
    tasks = [Task(id=f"t{i}", prompt=text, answer="0") for i, text in enumerate(TEXTS)]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))
    out = rollout_groups(engine, SingleTurnEnv(tokenizer, "raw"), tasks, GROUP, params, seed=5)
    for i, t in enumerate(out):
        t.rewards = {"correct": float(i % 3 == 0)}
        t.reward = t.rewards["correct"]
    return out


@pytest.fixture(scope="module")
def fp32_rollouts(tokenizer):
    return sample(tokenizer)


def step(trajectories, tokenizer, *overrides: str, bf16: bool = False):
    """prepare_batch + one update on the sampling weights; (prepare metrics, update metrics, batch)."""
    algo = load_config("default", list(overrides)).algo
    learner = PolicyLearner(start_model(tokenizer), lr=1e-3, bf16_autocast=bf16)
    batch, prepared = prepare_batch(trajectories, algo, get_estimator(algo.advantage), WEIGHTS, tokenizer.pad_token_id, learner, None, None)
    updated = learner.train_step(batch, make_policy_objective(algo))
    return prepared, updated, batch


def gap_of(prepared, updated) -> dict[str, float]:
    gap = {k: v for k, v in {**prepared, **updated}.items() if k.startswith("logprob_gap/")}
    assert len(gap) == 5, gap  # measured exactly once, in one of the two places
    return gap


@pytest.mark.parametrize("where", ["update", "prepare"])  # one optimizer step: free; two epochs: a no-grad forward
def test_an_exact_engine_has_no_gap(fp32_rollouts, tokenizer, where) -> None:
    prepared, updated, _ = step(fp32_rollouts, tokenizer, *(["algo.epochs=2"] if where == "prepare" else []))
    assert any(k.startswith("logprob_gap/") for k in (updated if where == "update" else prepared))
    gap = gap_of(prepared, updated)
    print(f"fp32 TorchEngine vs learner ({where}): {gap}")
    assert gap["logprob_gap/abs_max"] < NOISE
    assert abs(gap["logprob_gap/ratio_mean"] - 1) < NOISE and gap["logprob_gap/ratio_min"] > 1 - NOISE


@pytest.mark.parametrize("where", ["update", "prepare"])
def test_a_shift_by_hand_is_measured_exactly(fp32_rollouts, tokenizer, where) -> None:
    shifted = copy.deepcopy(fp32_rollouts)
    shifts = []
    for row, t in enumerate(shifted):  # engine log-prob + 0.3 on even rows, - 0.1 on odd rows
        delta = 0.3 if row % 2 == 0 else -0.1
        for i, sampled in enumerate(t.loss_mask):
            if sampled:
                t.behaviour_logprobs[i] += delta
                shifts.append(delta)
    prepared, updated, _ = step(shifted, tokenizer, *(["algo.epochs=2"] if where == "prepare" else []))
    gap = gap_of(prepared, updated)
    # learner - engine = -delta (+ noise)
    assert gap["logprob_gap/abs_mean"] == pytest.approx(sum(abs(d) for d in shifts) / len(shifts), abs=NOISE)
    assert gap["logprob_gap/abs_max"] == pytest.approx(0.3, abs=NOISE)
    assert gap["logprob_gap/ratio_min"] == pytest.approx(math.exp(-0.3), rel=NOISE)
    assert gap["logprob_gap/ratio_max"] == pytest.approx(math.exp(0.1), rel=NOISE)
    assert gap["logprob_gap/ratio_mean"] == pytest.approx(sum(math.exp(-d) for d in shifts) / len(shifts), rel=NOISE)


def test_bf16_engine_and_bf16_learner_show_a_gap_and_update(fp32_rollouts, tokenizer) -> None:
    engine_bf16 = gap_of(*step(sample(tokenizer, "bfloat16"), tokenizer)[:2])
    learner_bf16_prepared, learner_bf16_updated, _ = step(fp32_rollouts, tokenizer, bf16=True)
    learner_bf16 = gap_of(learner_bf16_prepared, learner_bf16_updated)
    print(f"bf16 engine vs fp32 learner: {engine_bf16}\nfp32 engine vs bf16-autocast learner: {learner_bf16}")
    for gap in (engine_bf16, learner_bf16):
        assert gap["logprob_gap/abs_mean"] > GAP_WARNING_THRESHOLD >= 10 * NOISE  # far above the fp32 noise
    assert math.isfinite(learner_bf16_updated["loss"]) and learner_bf16_updated["grad_norm"] > 0


def test_rollout_masking_drops_the_samples_pushed_out_of_the_band(fp32_rollouts, tokenizer) -> None:
    pushed = copy.deepcopy(fp32_rollouts)
    for t in pushed[::4]:  # 4 of 16 samples: engine log-probs 1.0 lower -> sequence ratio e^n >> 2
        t.behaviour_logprobs = [lp - 1.0 if m else lp for lp, m in zip(t.behaviour_logprobs, t.loss_mask)]
    prepared, updated, batch = step(
        pushed, tokenizer, "algo.rollout_mask=sequence", "algo.rollout_mask_high=2.0", "algo.tis_cap=2.0", "algo.tis_level=sequence"
    )
    rows_kept = batch.loss_mask.any(1).tolist()
    assert rows_kept == [i % 4 != 0 for i in range(len(pushed))]
    assert prepared["rollout_masked_samples"] == pytest.approx(4 / 16)
    assert "logprob_gap/abs_mean" in prepared  # the masking's forward measured the gap
    # the kept samples are exact: their sequence weights are 1 (up to noise), none capped
    assert prepared["tis_capped_frac"] == 0.0 and prepared["tis_weight_mean"] == pytest.approx(1.0, abs=1e-3)
    assert math.isfinite(updated["loss"])


@pytest.mark.parametrize("level", ["sequence", "geometric"])
def test_sequence_weights_folded_into_the_update_equal_the_explicit_ones(fp32_rollouts, tokenizer, level) -> None:
    """One optimizer step with algo.tis_cap: the update's forward gives the proximal log-probs and
    the sequence-level weights, accumulated over micro-batches of 4 rows; the same weights as from
    a no-grad forward of the whole batch (up to float32 noise)."""
    shifted = copy.deepcopy(fp32_rollouts)
    for row, t in enumerate(shifted):  # engine log-probs 0.5 lower on every third row: ratio e^(0.5 n), geometric e^0.5 > cap
        if row % 3 == 0:
            t.behaviour_logprobs = [lp - 0.5 if m else lp for lp, m in zip(t.behaviour_logprobs, t.loss_mask)]
    algo = load_config("default", ["algo.tis_cap=1.5", f"algo.tis_level={level}"]).algo
    learner = PolicyLearner(start_model(tokenizer), lr=1e-3, micro_batch_size=4)
    batch, prepared = prepare_batch(shifted, algo, get_estimator(algo.advantage), WEIGHTS, tokenizer.pad_token_id, learner, None, None)
    assert batch.tis_weights is None and "tis_weight_mean" not in prepared  # folded
    explicit, expected = rollout_is_weights(learner.logprobs(batch), batch.behaviour_logprobs, batch.loss_mask, 1.5, level)
    updated = learner.train_step(batch, make_policy_objective(algo))
    assert updated["tis_weight_mean"] == pytest.approx(expected["tis_weight_mean"], abs=1e-4)
    assert updated["tis_capped_frac"] == expected["tis_capped_frac"] > 0  # some samples' ratio exceeds the cap
    assert explicit[batch.loss_mask].min() < 1.5  # and others' do not
