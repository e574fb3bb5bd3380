"""RewardScorer: weighted totals and metrics, recorded errors, timeouts; the built-in reward fns."""

from __future__ import annotations

import math
import threading
import time

import pytest

from reinforge.rewards.builtin import FormatReward, VerifierReward, build_reward_fn
from reinforge.rewards.scorer import NamedReward, RewardFailure, RewardScorer
from reinforge.rollout.trajectory import Trajectory, single_turn_trajectory
from reinforge.tasks.task import Task

TASKS = {
    "t0": Task(id="t0", prompt="2+3=", answer="5"),
    "t1": Task(id="t1", prompt="3+4=", answer="7", verifier="numeric"),
}


def traj(task_id: str, response: str, finish_reason: str = "stop", group_id: int = 0) -> Trajectory:
    sampled = [10 + i for i in range(max(1, len(response)))]
    return single_turn_trajectory(task_id, [1, 2, 3], sampled, [-0.5] * len(sampled), response, finish_reason, group_id)


def length_reward(task: Task, trajectory: Trajectory) -> float:
    return float(len(trajectory.response_text))


def test_weighted_total_and_component_metrics(scorers) -> None:
    scorer = scorers(
        [
            NamedReward("correct", VerifierReward(), 2.0),
            NamedReward("format", FormatReward(r"\d+"), 0.5),
            NamedReward("length", length_reward, -0.1),
        ]
    )
    batch = [traj("t0", "5"), traj("t0", "66"), traj("t1", "7", finish_reason="length")]
    metrics = scorer.score(TASKS, batch)

    # correct: 1, 0, 1     format: 1, 1, 0 (the third ran out of tokens)     length: 1, 2, 1
    assert [t.rewards for t in batch] == [
        {"correct": 1.0, "format": 1.0, "length": 1.0},
        {"correct": 0.0, "format": 1.0, "length": 2.0},
        {"correct": 1.0, "format": 0.0, "length": 1.0},
    ]
    # totals: 2*1 + .5*1 - .1*1 = 2.4;  0 + .5 - .2 = 0.3;  2 + 0 - .1 = 1.9
    assert [t.reward for t in batch] == pytest.approx([2.4, 0.3, 1.9])
    assert metrics["reward"] == pytest.approx(4.6 / 3)
    assert metrics["reward_errors"] == 0.0
    # population std of {1, 0, 1} = sqrt(((1/3)^2 * 2 + (2/3)^2) / 3) = sqrt(2/9) = 0.4714045
    assert metrics["reward/correct/mean"] == pytest.approx(2 / 3)
    assert metrics["reward/correct/std"] == pytest.approx(0.4714045)
    assert metrics["reward/correct/frac_nonzero"] == pytest.approx(2 / 3)
    assert metrics["reward/format/mean"] == pytest.approx(2 / 3)
    assert metrics["reward/format/frac_nonzero"] == pytest.approx(2 / 3)
    assert metrics["reward/length/mean"] == pytest.approx(4 / 3)
    assert metrics["reward/length/std"] == pytest.approx(math.sqrt(2 / 9))
    assert metrics["reward/length/frac_nonzero"] == 1.0
    assert all(t.errors == [] for t in batch)


def exploding_reward(task: Task, trajectory: Trajectory) -> float:
    if trajectory.response_text == "bad":
        raise ValueError("boom on a bad sample")
    return 1.0


def test_one_failing_sample_is_recorded_and_the_run_continues(scorers) -> None:
    scorer = scorers([NamedReward("flaky", exploding_reward, 1.0), NamedReward("correct", VerifierReward(), 1.0)], max_error_fraction=0.5)
    batch = [traj("t0", "5"), traj("t0", "bad"), traj("t1", "7"), traj("t1", "8")]
    metrics = scorer.score(TASKS, batch)

    assert batch[1].rewards == {"flaky": 0.0, "correct": 0.0}
    assert batch[1].reward == 0.0
    assert len(batch[1].errors) == 1
    assert "flaky" in batch[1].errors[0] and "ValueError" in batch[1].errors[0] and "boom on a bad sample" in batch[1].errors[0]
    assert [t.errors for t in (batch[0], batch[2], batch[3])] == [[], [], []]
    assert [t.reward for t in batch] == [2.0, 0.0, 2.0, 1.0]
    assert metrics["reward_errors"] == 1.0
    # on_error=drop (default): the failed sample leaves the reward metrics, as it leaves the loss.
    assert batch[1].reward_failures == {"flaky": "raised"}
    assert metrics["reward/flaky/frac_nonzero"] == 1.0 and metrics["reward"] == pytest.approx(5 / 3)
    kept = [traj("t0", "5"), traj("t0", "bad"), traj("t1", "7"), traj("t1", "8")]
    fallback = scorers([NamedReward("flaky", exploding_reward, 1.0), NamedReward("correct", VerifierReward(), 1.0)], on_error="fallback")
    metrics = fallback.score(TASKS, kept)
    assert metrics["reward/flaky/frac_nonzero"] == 0.75 and metrics["reward"] == pytest.approx(5 / 4)

    # The same scorer keeps working.
    again = [traj("t0", "5")]
    scorer.score(TASKS, again)
    assert again[0].reward == 2.0 and again[0].errors == []


def test_too_many_failures_raise_with_the_original_traceback(scorers) -> None:
    scorer = scorers([NamedReward("flaky", exploding_reward, 1.0)], max_error_fraction=0.5)
    batch = [traj("t0", "bad"), traj("t0", "bad"), traj("t0", "5")]  # 2/3 > 0.5
    with pytest.raises(RewardFailure) as err:
        scorer.score(TASKS, batch)
    message = str(err.value)
    assert "2/3" in message and "max_error_fraction=0.5" in message
    assert "Traceback (most recent call last)" in message
    assert "exploding_reward" in message and "boom on a bad sample" in message


def test_error_fraction_at_the_limit_does_not_raise(scorers) -> None:
    scorer = scorers([NamedReward("flaky", exploding_reward, 1.0)], max_error_fraction=0.5)
    batch = [traj("t0", "bad"), traj("t0", "5")]  # exactly 1/2: not above the limit
    assert scorer.score(TASKS, batch)["reward_errors"] == 1.0


@pytest.fixture
def hanging_reward():
    """A reward fn that 'sleeps' 2 s on responses saying 'hang' (released at teardown, so no
    abandoned thread delays the interpreter's exit)."""
    release = threading.Event()

    def fn(task: Task, trajectory: Trajectory) -> float:
        if trajectory.response_text == "hang":
            release.wait(2.0)
        return 1.0

    yield fn
    release.set()


def test_slow_sample_times_out_alone_and_fast(scorers, hanging_reward) -> None:
    scorer = scorers([NamedReward("slow", hanging_reward, 1.0)], timeout_s=0.2, max_error_fraction=0.5)
    batch = [traj("t0", "5"), traj("t0", "hang"), traj("t1", "7"), traj("t1", "8")]
    start = time.monotonic()
    metrics = scorer.score(TASKS, batch)
    elapsed = time.monotonic() - start

    assert elapsed < 1.0, f"score() waited {elapsed:.2f} s for a call with a 0.2 s timeout"
    assert batch[1].rewards == {"slow": 0.0}
    assert len(batch[1].errors) == 1 and batch[1].errors[0].startswith("reward slow: timed out after 0.2 s")
    assert batch[1].reward_failures == {"slow": "timeout"}
    assert [t.reward for t in batch] == [1.0, 0.0, 1.0, 1.0]
    assert [t.errors for t in (batch[0], batch[2], batch[3])] == [[], [], []]
    assert metrics["reward_errors"] == 1.0

    nxt = [traj("t0", "5"), traj("t1", "7")]
    start = time.monotonic()
    scorer.score(TASKS, nxt)
    assert time.monotonic() - start < 1.0
    assert [t.reward for t in nxt] == [1.0, 1.0] and all(t.errors == [] for t in nxt)


def test_scorer_recovers_after_every_worker_hung(scorers, hanging_reward) -> None:
    scorer = scorers([NamedReward("slow", hanging_reward, 1.0)], timeout_s=0.2, max_error_fraction=1.0, workers=2)
    batch = [traj("t0", "hang"), traj("t0", "hang"), traj("t0", "5")]
    start = time.monotonic()
    scorer.score(TASKS, batch)
    assert time.monotonic() - start < 1.5
    assert all(len(t.errors) == 1 and t.errors[0].startswith("reward slow: timed out after 0.2 s") for t in batch[:2])

    nxt = [traj("t0", "5"), traj("t1", "7"), traj("t1", "8")]
    start = time.monotonic()
    metrics = scorer.score(TASKS, nxt)
    assert time.monotonic() - start < 1.0
    assert [t.reward for t in nxt] == [1.0, 1.0, 1.0]
    assert metrics["reward_errors"] == 0.0


def test_timeouts_above_the_limit_raise(scorers, hanging_reward) -> None:
    scorer = scorers([NamedReward("slow", hanging_reward, 1.0)], timeout_s=0.2, max_error_fraction=0.4)
    with pytest.raises(RewardFailure, match="timed out after 0.2 s"):
        scorer.score(TASKS, [traj("t0", "hang"), traj("t0", "5")])


def test_scorer_needs_components() -> None:
    with pytest.raises(ValueError, match="at least one"):
        RewardScorer([])


# --------------------------------------------------------------------------- built-in reward fns


def test_verifier_reward_uses_the_task_verifier() -> None:
    reward = VerifierReward()
    assert reward(TASKS["t1"], traj("t1", "<answer>7.0</answer>")) == 1.0  # numeric verifier
    assert reward(TASKS["t0"], traj("t0", "<answer>5.0</answer>")) == 0.0  # exact verifier
    assert reward(TASKS["t0"], traj("t0", "thinking <answer>5</answer>")) == 1.0


def test_format_reward_full_match_and_require_stop() -> None:
    digits = FormatReward(r"\d+")
    assert digits(TASKS["t0"], traj("t0", "  42 \n")) == 1.0  # surrounding space ignored
    assert digits(TASKS["t0"], traj("t0", "42 apples")) == 0.0  # full match, not search
    assert digits(TASKS["t0"], traj("t0", "x42")) == 0.0
    assert digits(TASKS["t0"], traj("t0", "42", finish_reason="length")) == 0.0
    assert FormatReward(r"\d+", require_stop=False)(TASKS["t0"], traj("t0", "42", finish_reason="length")) == 1.0

    tagged = FormatReward(r"<think>.*</think>\s*<answer>.*</answer>")
    assert tagged(TASKS["t0"], traj("t0", "<think>a\nb</think>\n<answer>5</answer>")) == 1.0  # DOTALL
    assert tagged(TASKS["t0"], traj("t0", "<answer>5</answer>")) == 0.0


def test_build_reward_fn() -> None:
    assert isinstance(build_reward_fn("verifier", {}), VerifierReward)
    fmt = build_reward_fn("format", {"pattern": "a+", "require_stop": False})
    assert isinstance(fmt, FormatReward) and fmt.require_stop is False
    assert fmt(TASKS["t0"], traj("t0", "aaa", finish_reason="length")) == 1.0


def test_build_reward_fn_unknown_name_lists_valid_names() -> None:
    with pytest.raises(ValueError) as err:
        build_reward_fn("verifer", {})
    message = str(err.value)
    assert "'verifer'" in message and "format" in message and "verifier" in message


@pytest.mark.parametrize(
    "fn, params, fragment",
    [
        ("format", {}, "bad params"),  # missing pattern
        ("format", {"pattern": "a", "bogus": 1}, "bad params"),
        ("verifier", {"strict": True}, "bad params"),
        ("format", {"pattern": "(unclosed"}, "invalid regex"),
    ],
)
def test_build_reward_fn_bad_params(fn: str, params: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as err:
        build_reward_fn(fn, params)
    assert repr(fn) in str(err.value) or "format reward" in str(err.value)
