"""Group rewards (scored on a whole group at once) inside the reward service."""

from __future__ import annotations

from reinforge.rewards.builtin import build_component
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.rollout.trajectory import Trajectory, single_turn_trajectory
from reinforge.tasks.task import Task

TASKS = {"a": Task(id="a", prompt="p", answer="?"), "b": Task(id="b", prompt="q", answer="?")}


def trajectory(task_id: str, group_id: int, response: str) -> Trajectory:
    return single_turn_trajectory(task_id, [1], [2], [0.0], response, group_id=group_id)


def test_majority_vote_is_scored_per_group_and_combined_with_sample_rewards():
    vote, is_group = build_component("majority_vote", {})
    fmt, _ = build_component("format", {"pattern": r"\d+"})
    assert is_group
    scorer = RewardScorer([NamedReward("vote", vote, 1.0, group=True), NamedReward("format", fmt, 0.5)], isolation="thread")
    batch = [trajectory("a", 0, r) for r in ("4", "4", "5", "x")] + [trajectory("b", 1, r) for r in ("7", "8", "8", "8")]
    metrics = scorer.score(TASKS, batch)
    assert [t.rewards["vote"] for t in batch] == [1, 1, 0, 0, 0, 1, 1, 1]
    assert [t.reward for t in batch] == [1.5, 1.5, 0.5, 0.0, 0.5, 1.5, 1.5, 1.5]
    assert metrics["reward/vote/mean"] == metrics["reward/vote/agreement"] == 5 / 8  # the votes' agreement rate
    scorer.close()


def test_a_group_reward_returning_the_wrong_number_of_scores_is_an_error_on_each_sample():
    scorer = RewardScorer([NamedReward("bad", lambda task, group: [1.0], 1.0, group=True)], max_error_fraction=1.0, isolation="thread")
    batch = [trajectory("a", 0, "1"), trajectory("a", 0, "2")]
    metrics = scorer.score(TASKS, batch)
    assert metrics["reward_errors"] == 2
    assert all("returned 1 scores for 2 samples" in t.errors[0] for t in batch)
    scorer.close()


def test_unknown_names_list_sample_and_group_rewards():
    try:
        build_component("nope", {})
    except ValueError as err:
        assert "majority_vote" in str(err) and "verifier" in str(err)
    else:
        raise AssertionError("unknown reward name accepted")


def test_a_reward_with_score_batch_is_called_once_per_batch():
    class CountingBatchReward:
        calls = 0

        def __call__(self, task, trajectory):
            raise AssertionError("the scorer should use score_batch")

        def score_batch(self, tasks, trajectories):
            CountingBatchReward.calls += 1
            return [float(len(t.response_text)) for t in trajectories]

    scorer = RewardScorer([NamedReward("rm", CountingBatchReward(), 1.0)], isolation="thread")
    batch = [trajectory("a", 0, "1"), trajectory("a", 0, "22"), trajectory("b", 1, "333")]
    scorer.score(TASKS, batch)
    assert CountingBatchReward.calls == 1 and [t.reward for t in batch] == [1.0, 2.0, 3.0]
    scorer.close()
