"""Reward calls in worker processes: a hung, GIL-holding or crashing reward is stopped, counted
against the right component for the right reason, and the rest of the batch is still scored."""

from __future__ import annotations

import pytest
from hostile_rewards import CATASTROPHIC_PATTERN, length_or_crash, sleeps_forever_on_hang

from reinforge.rewards.builtin import VerifierReward
from reinforge.rewards.call_errors import RewardTimeout
from reinforge.rewards.scorer import NamedReward, RewardFailure, RewardScorer
from reinforge.rollout.trajectory import Trajectory, single_turn_trajectory
from reinforge.tasks.task import Task

TASKS = {
    "sum": Task(id="sum", prompt="2+3=", answer="5"),
    "regex": Task(id="regex", prompt="say y", answer="", verifier="regex", metadata={"pattern": CATASTROPHIC_PATTERN}),
}
VERIFIER = NamedReward("correct", VerifierReward(), 1.0, spec=("verifier", {}))


def traj(task_id: str, response: str, group_id: int = 0) -> Trajectory:
    return single_turn_trajectory(task_id, [1, 2], [3, 4], [-0.5, -0.5], response, "stop", group_id)


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_4_of_32_hanging_calls_fail_alone_and_are_blamed_on_their_component(scorers, isolation: str) -> None:
    # Two workers, so each process gets chunks of several calls: a hang in the middle of a chunk is
    # killed and the calls of that chunk it had not reached are still scored. Threads: the hung
    # ones are abandoned and replaced, the other calls still run (they used to be failed too).
    scorer = scorers(
        [NamedReward("slow", sleeps_forever_on_hang, 1.0), VERIFIER],
        isolation=isolation, workers=2, timeout_s=1.0, max_error_fraction=0.5,
    )
    hanging = {3, 10, 17, 29}
    batch = [traj("sum", "hang" if i in hanging else "5", group_id=i // 4) for i in range(32)]
    metrics = scorer.score(TASKS, batch)

    for i, t in enumerate(batch):
        if i in hanging:
            assert t.reward_failures == {"slow": "timeout"}, i
            assert t.rewards == {"slow": 0.0, "correct": 0.0}
            assert len(t.errors) == 1 and t.errors[0].startswith("reward slow: timed out after 1 s")
        else:
            assert t.reward_failures == {} and t.errors == [], i
            assert t.rewards == {"slow": 1.0, "correct": 1.0}
    assert metrics["reward_errors"] == 4.0
    assert metrics["reward_failed/slow/timeout"] == 4.0
    assert not any(k.startswith("reward_failed/correct") for k in metrics)  # the verifier never failed
    assert metrics["reward"] == 2.0  # over the 28 scored samples (on_error=drop)
    if isolation == "process":
        assert scorer._processes.replacements == 4  # each hung worker killed and replaced
    else:
        assert scorer._threads.abandoned == 4


def test_gil_holding_verifier_is_stopped_by_the_timeout(scorers) -> None:
    scorer = scorers([VERIFIER], isolation="process", workers=2, timeout_s=1.0, max_error_fraction=0.5)
    batch = [traj("regex", "y" * 30), traj("sum", "5"), traj("sum", "4")]
    metrics = scorer.score(TASKS, batch)
    assert [t.reward_failures for t in batch] == [{"correct": "timeout"}, {}, {}]
    assert [t.rewards["correct"] for t in batch[1:]] == [1.0, 0.0]
    assert metrics["reward_failed/correct/timeout"] == 1.0
    # Evaluation verifies in the same workers, under the same timeout.
    outcomes = scorer.verify_responses([TASKS["regex"], TASKS["sum"]], ["y" * 30, "5"])
    assert isinstance(outcomes[0], RewardTimeout) and outcomes[1] == 1.0


def test_a_worker_that_dies_or_a_reward_that_raises_is_counted_with_its_reason(scorers) -> None:
    scorer = scorers([NamedReward("length", length_or_crash, 1.0)], isolation="process", workers=1, max_error_fraction=1.0)
    batch = [traj("sum", "ab"), traj("sum", "crash"), traj("sum", "abc"), traj("sum", "raise"), traj("sum", "a")]
    metrics = scorer.score(TASKS, batch)
    assert [t.reward_failures for t in batch] == [{}, {"length": "worker_died"}, {}, {"length": "raised"}, {}]
    assert [batch[i].rewards["length"] for i in (0, 2, 4)] == [2.0, 3.0, 1.0]  # scored after the crash too
    assert "exit status 3" in batch[1].errors[0]
    assert "ValueError: this reward refuses the word 'raise'" in batch[3].errors[0]
    assert (metrics["reward_failed/length/worker_died"], metrics["reward_failed/length/raised"]) == (1.0, 1.0)


def test_too_many_failures_name_each_component_and_reason(scorers) -> None:
    scorer = scorers([NamedReward("slow", sleeps_forever_on_hang, 1.0), VERIFIER], isolation="process", timeout_s=1.0)
    batch = [traj("sum", "hang"), traj("sum", "hang"), traj("sum", "5")]
    with pytest.raises(RewardFailure) as err:
        scorer.score(TASKS, batch)
    assert "2/3 samples" in str(err.value) and "component 'slow' timed out on 2 samples" in str(err.value)
    assert "'correct'" not in str(err.value)


def test_a_closure_cannot_cross_to_a_worker_and_says_what_to_do() -> None:
    with pytest.raises(ValueError, match="reward component 'inline' cannot be sent to a reward worker process") as err:
        RewardScorer([NamedReward("inline", lambda task, t: 1.0, 1.0)], isolation="process")
    assert "reward.isolation=thread" in str(err.value) and "`fn` + `params`" in str(err.value)


def test_a_reward_that_cannot_be_built_in_the_worker_fails_every_call_with_the_reason() -> None:
    scorer = RewardScorer([NamedReward("broken", VerifierReward(), 1.0, spec=("no_such_reward", {}))], max_error_fraction=1.0)
    try:
        batch = [traj("sum", "5"), traj("sum", "6")]
        scorer.score(TASKS, batch)
        assert [t.reward_failures for t in batch] == [{"broken": "worker_died"}] * 2
        assert "could not start" in batch[0].errors[0] and "unknown reward function 'no_such_reward'" in batch[0].errors[0]
    finally:
        scorer.close()


def test_close_leaves_no_worker_process(scorers) -> None:
    import os

    scorer = scorers([VERIFIER], isolation="process", workers=2)
    scorer.score(TASKS, [traj("sum", "5")])
    pids = scorer.worker_pids()
    assert len(pids) == 2
    scorer.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
