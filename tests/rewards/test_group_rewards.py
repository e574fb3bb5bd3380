"""Group rewards on hand-computed examples."""

from __future__ import annotations

import random

import pytest

from reinforge.rewards.group import MajorityVote, PairwisePreference, Tournament, build_group_reward_fn
from reinforge.rewards.judge import PairwiseJudge
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

TASK = Task(id="task-7", prompt="2+2=", answer="")


def group(*texts: str) -> list[Trajectory]:
    return [Trajectory("task-7", 0, [], [], [], [], 0, text, 0, "stop") for text in texts]


def by_value(task: Task, a: str, b: str) -> bool:
    return int(a) > int(b)


# --- majority vote -----------------------------------------------------------------------------


def test_majority_vote_rewards_agreement_with_the_pseudo_label():
    vote = MajorityVote()
    assert vote(TASK, group("4", "4", "5", "<answer>4</answer>")) == [1.0, 1.0, 0.0, 1.0]
    assert vote.last_label == "4"
    assert vote.last_agreement == 0.75


def test_majority_vote_breaks_ties_by_first_occurrence():
    vote = MajorityVote()
    assert vote(TASK, group("5", "4", "4", "5")) == [1.0, 0.0, 0.0, 1.0]
    assert vote.last_label == "5" and vote.last_agreement == 0.5


def test_majority_vote_normalizes_and_ignores_empty_answers():
    vote = MajorityVote()
    assert vote(TASK, group("", "<answer> </answer>", "Paris", " paris ")) == [0.0, 0.0, 1.0, 1.0]
    assert vote(TASK, group("", "  ")) == [0.0, 0.0]
    assert vote.last_label is None and vote.last_agreement == 0.0


def test_majority_vote_numeric_mode_votes_by_value():
    assert MajorityVote()(TASK, group("4", "4.0", "8/2", "5", "5")) == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert MajorityVote(numeric=True)(TASK, group("4", "4.0", "8/2", "5", "5")) == [1.0, 1.0, 1.0, 0.0, 0.0]


# --- pairwise preference -----------------------------------------------------------------------


def test_win_rates_under_a_fixed_float_comparator():
    table = {("a", "bb"): 0.8, ("a", "ccc"): 0.3, ("bb", "ccc"): 0.6}
    calls = []

    def prefer(task, x, y):
        calls.append((x, y))
        return table[(x, y)]

    rewards = PairwisePreference(prefer, both_orders=False)(TASK, group("a", "bb", "ccc"))
    # a: (0.8 + 0.3) / 2; bb: (0.2 + 0.6) / 2; ccc: (0.7 + 0.4) / 2
    assert rewards == pytest.approx([0.55, 0.4, 0.55])
    assert len(calls) == 3


def test_both_orders_cancels_position_bias():
    def always_first(task, x, y):
        return True

    assert PairwisePreference(always_first, both_orders=False)(TASK, group("1", "2", "3")) == [1.0, 0.5, 0.0]
    assert PairwisePreference(always_first, both_orders=True)(TASK, group("1", "2", "3")) == [0.5, 0.5, 0.5]
    assert PairwisePreference(by_value)(TASK, group("2", "1", "3", "0")) == pytest.approx([2 / 3, 1 / 3, 1.0, 0.0])


def test_pairwise_rejects_bad_comparator_output_and_groups_of_one():
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        PairwisePreference(lambda t, a, b: 1.5)(TASK, group("1", "2"))
    with pytest.raises(ValueError, match="at least 2"):
        PairwisePreference(by_value)(TASK, group("1"))


# --- tournament --------------------------------------------------------------------------------


def counting(compare):
    calls = []

    def wrapped(task, a, b):
        calls.append((a, b))
        return compare(task, a, b)

    return wrapped, calls


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 13])
def test_tournament_uses_n_minus_1_comparisons_and_crowns_the_best(n):
    values = random.Random(n).sample(range(100), n)
    compare, calls = counting(by_value)
    tournament = Tournament(compare, seed=3)
    rewards = tournament(TASK, group(*map(str, values)))
    assert len(calls) == n - 1 == tournament.last_comparisons
    best = values.index(max(values))
    assert rewards[best] == 1.0
    assert sorted(rewards)[-2] < 1.0  # one champion
    assert min(rewards) == 0.0 and all(0.0 <= r <= 1.0 for r in rewards)
    assert sorted(tournament.last_bracket) == list(range(n))


def test_tournament_of_eight_gives_normalized_rounds():
    rewards = Tournament(by_value, seed=0)(TASK, group(*map(str, range(8))))
    assert sorted(rewards) == [0, 0, 0, 0, 1 / 3, 1 / 3, 2 / 3, 1]
    assert rewards[7] == 1.0


def test_tournament_of_three_with_a_bye_by_hand():
    tournament = Tournament(by_value, seed=0)
    values = [10, 30, 20]
    rewards = tournament(TASK, group(*map(str, values)))
    first, second, bye = tournament.last_bracket
    # Round 0: first vs second, `bye` advances; round 1: the winner vs `bye`. Two rounds.
    expected = [0.0, 0.0, 0.0]
    round0_winner, round0_loser = (first, second) if values[first] > values[second] else (second, first)
    final_winner, final_loser = (round0_winner, bye) if values[round0_winner] > values[bye] else (bye, round0_winner)
    expected[round0_loser], expected[final_loser], expected[final_winner] = 0.0, 0.5, 1.0
    assert rewards == expected


def test_tournament_is_reproducible_under_a_seed():
    values = list(map(str, random.Random(1).sample(range(100), 9)))
    first = Tournament(by_value, seed=5)
    again = Tournament(by_value, seed=5)
    assert first(TASK, group(*values)) == again(TASK, group(*values))
    assert first.last_bracket == again.last_bracket
    brackets = set()
    for seed in range(6):
        t = Tournament(by_value, seed=seed)
        t(TASK, group(*values))
        brackets.add(tuple(t.last_bracket))
    assert len(brackets) > 1  # the seed matters


def test_tournament_ties_are_decided_by_the_seeded_generator():
    always_tied = lambda t, a, b: 0.5  # noqa: E731
    rewards = [Tournament(always_tied, seed=2)(TASK, group("a", "b", "c", "d")) for _ in range(2)]
    assert rewards[0] == rewards[1]
    assert sorted(rewards[0]) == [0.0, 0.0, 0.5, 1.0]


def test_tournament_rejects_groups_of_one():
    with pytest.raises(ValueError, match="at least 2"):
        Tournament(by_value)(TASK, group("1"))


# --- registry ----------------------------------------------------------------------------------


def test_group_rewards_by_name():
    assert isinstance(build_group_reward_fn("majority_vote", {"numeric": True}), MajorityVote)
    tournament = build_group_reward_fn("tournament", {"judge": {"chat": lambda m: "A"}, "seed": 1})
    assert isinstance(tournament, Tournament) and isinstance(tournament.compare, PairwiseJudge)
    rewards = tournament(TASK, group("x", "y"))
    assert rewards[tournament.last_bracket[0]] == 1.0 and sorted(rewards) == [0.0, 1.0]  # "A" always wins
    pairwise = build_group_reward_fn("pairwise_preference", {"judge": {"chat": lambda m: "A"}, "both_orders": False})
    assert pairwise(TASK, group("x", "y")) == [1.0, 0.0]
    with pytest.raises(ValueError, match="unknown group reward"):
        build_group_reward_fn("nope", {})
    with pytest.raises(ValueError, match="bad params"):
        build_group_reward_fn("majority_vote", {"bogus": 1})
