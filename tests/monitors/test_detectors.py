"""Each training-health detector fires on a crafted metric history and stays quiet on a near miss.

Histories use the default thresholds (MonitorConfig()) and window W = 10 unless a test says
otherwise; the numbers in each comment are the detector's formula worked out by hand.
"""

from __future__ import annotations

import pytest
from histories import history, steps

from reinforge.config import MonitorConfig
from reinforge.monitors import (
    clip_spike,
    entropy_collapse,
    format_hacking,
    kl_blowup,
    logprob_gap_blowup,
    mode_collapse,
    response_length,
    reward_hacking,
    zero_variance,
)

W = 10
CFG = MonitorConfig()


def read(detector, rows, evals=None, settings=None):
    return detector.check(history(rows, evals), settings or getattr(CFG, detector.NAME), W)


def test_entropy_collapse() -> None:
    # first 10 steps 1.0, last 10 steps 0.05: ratio 0.05 / 1.0 = 0.05 < 0.1
    reading = read(entropy_collapse, steps(20, entropy=[1.0] * 10 + [0.05] * 10))
    assert reading.fired and reading.value == pytest.approx(0.05)
    assert "0.05x" in reading.message and "threshold 0.1x" in reading.message and "algo.entropy_coef" in reading.message
    # 0.2 / 1.0 = 0.2 >= 0.1: quiet
    assert not read(entropy_collapse, steps(20, entropy=[1.0] * 10 + [0.2] * 10)).fired
    # 19 steps: the two windows would overlap, no reading yet
    assert read(entropy_collapse, steps(19, entropy=0.01)) is None


def test_kl_blowup_spike_and_ceiling() -> None:
    # median of the previous 10 = 0.02; 0.2 = 10x > 5x and > the 0.05 floor
    reading = read(kl_blowup, steps(11, kl_ref=[0.02] * 10 + [0.2]))
    assert reading.fired and reading.value == pytest.approx(0.2)
    assert "10x its median 0.02" in reading.message and "threshold 5x" in reading.message
    # 1.5 > the 1.0 ceiling, even on the first step
    assert read(kl_blowup, steps(1, kl_ref=1.5)).fired
    # 0.04 = 2x the median: quiet; 1e-4 -> 1e-2 is 100x but below the floor: quiet
    assert not read(kl_blowup, steps(11, kl_ref=[0.02] * 10 + [0.04])).fired
    assert not read(kl_blowup, steps(11, kl_ref=[1e-4] * 10 + [1e-2])).fired
    # no reference model in the run: nothing to watch
    assert read(kl_blowup, steps(11, entropy=1.0)) is None


def test_logprob_gap_blowup() -> None:
    # median 1e-3; 0.05 = 50x > 10x and > the 0.01 floor
    reading = read(logprob_gap_blowup, steps(11, **{"logprob_gap__abs_mean": [1e-3] * 10 + [0.05]}))
    assert reading.fired and "algo.tis_cap" in reading.message
    # a steady bf16-sized gap is quiet, and so is 5x of it (below 10x)
    assert not read(logprob_gap_blowup, steps(11, **{"logprob_gap__abs_mean": [1e-3] * 10 + [5e-3]})).fired
    assert read(logprob_gap_blowup, steps(3, **{"logprob_gap__abs_mean": [1e-3, 1e-3, 0.2]})).fired  # > 0.1 ceiling


def test_clip_spike() -> None:
    # median 0.02; 0.15 = 7.5x > 3x and > the 0.1 floor
    reading = read(clip_spike, steps(11, clip_frac=[0.02] * 10 + [0.15]))
    assert reading.fired and reading.value == pytest.approx(0.15) and "7.5x" in reading.message
    # 0.05 = 2.5x: quiet; a median of 0 and 0.05 (below the floor): quiet; 0.35 > 0.3 ceiling: fires
    assert not read(clip_spike, steps(11, clip_frac=[0.02] * 10 + [0.05])).fired
    assert not read(clip_spike, steps(11, clip_frac=[0.0] * 10 + [0.05])).fired
    assert read(clip_spike, steps(11, clip_frac=[0.0] * 10 + [0.35])).fired
    from_zero = read(clip_spike, steps(11, clip_frac=[0.0] * 10 + [0.2]))  # 0.2 > the floor, > 3 x 0
    assert from_zero.fired and "up from a median of 0" in from_zero.message


def test_response_length_running_away_and_collapsing() -> None:
    # 500 / 100 = 5x > 4x
    away = read(response_length, steps(20, response_length=[100.0] * 10 + [500.0] * 10))
    assert away.fired and away.value == pytest.approx(5.0) and "running away" in away.message
    # 20 / 100 = 0.2x < 0.25x
    short = read(response_length, steps(20, response_length=[100.0] * 10 + [20.0] * 10))
    assert short.fired and "collapsing" in short.message
    # 300 / 100 = 3x: a reasoning run getting longer, quiet
    assert not read(response_length, steps(20, response_length=[100.0] * 10 + [300.0] * 10)).fired


def hacking_evals(last: float) -> list[dict]:
    return [{"step": 0, "accuracy": 0.4}, {"step": 10, "accuracy": 0.6}, {"step": 20, "accuracy": last}]


def test_reward_hacking() -> None:
    # best earlier evaluation: step 10 (0.6); now 0.5: drop 0.1 >= 0.05. Reward: mean(steps 11-20) = 0.8,
    # mean(steps 1-10, the window up to the best evaluation) = 0.3: rise 0.5 >= 0.05
    rows = steps(20, reward=[0.3] * 10 + [0.8] * 10)
    reading = read(reward_hacking, rows, hacking_evals(0.5))
    assert reading.fired and reading.value == pytest.approx(0.1)
    assert "from 0.6 at step 10 to 0.5" in reading.message and "rose 0.5" in reading.message
    # accuracy held (0.58: drop 0.02): quiet; reward fell as well (0.2 after 0.3): quiet
    assert not read(reward_hacking, rows, hacking_evals(0.58)).fired
    assert not read(reward_hacking, steps(20, reward=[0.3] * 10 + [0.2] * 10), hacking_evals(0.5)).fired
    # read only at an evaluation step
    assert read(reward_hacking, rows[:19], hacking_evals(0.5)[:2]) is None


def test_reward_hacking_against_the_evaluation_before_rl() -> None:
    # the best evaluation is step 0 (0.7): its reward window is the first 10 steps (0.2); now 0.5 at step 20
    rows = steps(20, reward=[0.2] * 10 + [0.9] * 10)
    reading = read(reward_hacking, rows, [{"step": 0, "accuracy": 0.7}, {"step": 20, "accuracy": 0.5}])
    assert reading.fired and reading.value == pytest.approx(0.2)


def test_format_hacking() -> None:
    # verifier 'correct': 0.8 -> 0.6 (fall 0.2 >= 0.05); 'format': 0.5 -> 0.9 (rise 0.4 >= 0.05)
    rows = steps(20, reward__correct__mean=[0.8] * 10 + [0.6] * 10, reward__format__mean=[0.5] * 10 + [0.9] * 10)
    settings = CFG.format_hacking.model_copy(update={"verifier": "correct"})
    reading = read(format_hacking, rows, settings=settings)
    assert reading.fired and reading.value == pytest.approx(0.2)
    assert "'format' rose 0.4" in reading.message and "'correct' fell 0.2" in reading.message
    # both rising (the default recipe's shape) is quiet; no verifier is no reading
    rising = steps(20, reward__correct__mean=[0.5] * 10 + [0.8] * 10, reward__format__mean=[0.9] * 10 + [1.0] * 10)
    assert not read(format_hacking, rising, settings=settings).fired
    assert read(format_hacking, rows) is None  # settings.verifier unset


def test_the_verifier_component_is_found_by_its_function() -> None:
    from reinforge.config import load_config

    components = load_config("default").reward.components  # correct (verifier), format (format)
    assert format_hacking.verifier_component(components, None) == "correct"
    assert format_hacking.verifier_component(components, "format") == "format"
    assert format_hacking.verifier_component(components[1:], None) is None


def test_mode_collapse() -> None:
    # mean of the last 10 steps 0.95 > 0.9
    reading = read(mode_collapse, steps(10, identical_response_group_frac=0.95))
    assert reading.fired and reading.value == pytest.approx(0.95) and "threshold 0.9" in reading.message
    # 9 steps at 1.0 and one at 0.0: mean 0.9, not above 0.9: quiet
    assert not read(mode_collapse, steps(10, identical_response_group_frac=[1.0] * 9 + [0.0])).fired
    assert read(mode_collapse, steps(9, identical_response_group_frac=1.0)) is None


def test_zero_variance_prefers_the_sampled_share() -> None:
    # dynamic sampling refills the batch (trained share 0) but 0.95 of the sampled groups were flat
    rows = steps(10, sampled_zero_variance_group_frac=0.95, zero_variance_group_frac=0.0)
    reading = read(zero_variance, rows)
    assert reading.fired and reading.value == pytest.approx(0.95) and "algo.dynamic_sampling" in reading.message
    assert read(zero_variance, steps(10, zero_variance_group_frac=0.95)).fired  # a collector without the sampled share
    assert not read(zero_variance, steps(10, zero_variance_group_frac=0.5)).fired
