"""Group rewards: scores that need the whole group of responses to one task at once.

A GroupRewardFn is `(task, trajectories) -> list[float]`, one reward per trajectory, in order.
All three below are pure logic around an injectable comparator or answer key, so they are
tested on hand-computed examples; a comparator is `(task, a, b) -> bool | float`: True / 1.0
when response a is better than b, a float in [0, 1] for a probability (see judge.PairwiseJudge).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

from reinforge.tasks.answer_extraction import task_answer
from reinforge.tasks.verifiers import normalize, parse_number
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

Comparator = Callable[[Task, str, str], "bool | float"]


class GroupRewardFn(Protocol):
    def __call__(self, task: Task, trajectories: list[Trajectory]) -> list[float]: ...


def preference(compare: Comparator, task: Task, a: str, b: str) -> float:
    """P(a better than b) in [0, 1] from a comparator's bool or float answer."""
    value = compare(task, a, b)
    p = float(value)
    if not 0.0 <= p <= 1.0:  # also rejects NaN
        raise ValueError(f"comparator must return a bool or a float in [0, 1], got {value!r}")
    return p


def _require_group(name: str, trajectories: list[Trajectory]) -> None:
    if len(trajectories) < 2:
        raise ValueError(f"{name} needs a group of at least 2 responses, got {len(trajectories)}")


class MajorityVote:
    """Self-reward without labels (TTRL, Zuo et al. 2025; Co-Reward): the pseudo-label is the most
    common extracted answer of the group, ties broken by first occurrence; a response scores 1 when
    its answer equals the pseudo-label, else 0.

    Answers are the task's extracted answers (`Task.answer_extractor`) then whitespace/case `normalize`; with `numeric=True`, answers
    that parse as numbers vote by value ("4", "4.0" and "8/2" agree). Empty answers never vote and
    never agree. `last_label` and `last_agreement` (the fraction of the group that agrees with the
    pseudo-label: how confident the vote is) describe the latest call, for metrics.
    """

    # The scorer logs this part's mean under this name too: for a majority vote it is the
    # agreement rate, how confident the group's pseudo-label is.
    mean_metric = "agreement"

    def __init__(self, numeric: bool = False):
        self.numeric = numeric
        self.last_label: str | None = None
        self.last_agreement: float = 0.0

    def answer_key(self, task: Task, response: str) -> str:
        answer = normalize(task_answer(task, response) or "")
        if self.numeric:
            value = parse_number(answer)
            if value is not None:
                return repr(value + 0.0)  # + 0.0 folds -0.0 into 0.0
        return answer

    def __call__(self, task: Task, trajectories: list[Trajectory]) -> list[float]:
        keys = [self.answer_key(task, t.response_text) for t in trajectories]
        votes = Counter(k for k in keys if k)
        if not votes:
            self.last_label, self.last_agreement = None, 0.0
            return [0.0] * len(trajectories)
        # Counter keeps insertion order and max() returns the first maximum: first occurrence wins.
        label = max(votes, key=votes.__getitem__)
        rewards = [1.0 if k == label else 0.0 for k in keys]
        self.last_label, self.last_agreement = label, sum(rewards) / len(rewards)
        return rewards


class PairwisePreference:
    """Pref-GRPO (Wang et al. 2025): a response's reward is its win rate against the other members
    of its group under a pairwise judge,

        r_i = 1/(n-1) * sum_{j != i} P(i > j).

    With `both_orders=True` (default) each pair is judged in both positions and
    P(i > j) = (prefer(i, j) + 1 - prefer(j, i)) / 2, cancelling a judge's position bias, at
    n(n-1) comparisons; otherwise n(n-1)/2, P(j > i) = 1 - P(i > j).
    """

    def __init__(self, prefer: Comparator, both_orders: bool = True):
        self.prefer = prefer
        self.both_orders = both_orders

    def __call__(self, task: Task, trajectories: list[Trajectory]) -> list[float]:
        _require_group("pairwise preference", trajectories)
        texts = [t.response_text for t in trajectories]
        n = len(texts)
        wins = [0.0] * n
        for i in range(n):
            for j in range(i + 1, n):
                p = preference(self.prefer, task, texts[i], texts[j])
                if self.both_orders:
                    p = (p + 1.0 - preference(self.prefer, task, texts[j], texts[i])) / 2
                wins[i] += p
                wins[j] += 1.0 - p
        return [w / (n - 1) for w in wins]


class Tournament:
    """ArenaRL-style single-elimination tournament over the group: exactly n-1 comparisons.

    The bracket is a shuffle seeded by (`seed`, task id), so a group is judged reproducibly; in a
    round with an odd number of players the last one of the bracket gets a bye. The reward is the
    normalized round reached: a player eliminated in round r (0-based) scores r / R, where R is
    the number of rounds played; the champion scores 1.0, first-round losers 0.0. A tied
    comparison (P = 0.5) is decided by the seeded generator. `last_bracket` is the latest shuffled
    order, `last_comparisons` the number of comparisons it took.
    """

    def __init__(self, compare: Comparator, seed: int = 0):
        self.compare = compare
        self.seed = seed
        self.last_bracket: list[int] = []
        self.last_comparisons = 0

    def __call__(self, task: Task, trajectories: list[Trajectory]) -> list[float]:
        _require_group("tournament", trajectories)
        texts = [t.response_text for t in trajectories]
        rng = random.Random(f"{self.seed}:{task.id}")  # str seeds are hashed deterministically
        players = list(range(len(texts)))
        rng.shuffle(players)
        self.last_bracket = list(players)
        eliminated_in: dict[int, int] = {}
        rounds = comparisons = 0
        while len(players) > 1:
            advancing = []
            for k in range(0, len(players) - 1, 2):
                a, b = players[k], players[k + 1]
                p = preference(self.compare, task, texts[a], texts[b])
                comparisons += 1
                a_wins = p > 0.5 or (p == 0.5 and rng.random() < 0.5)
                winner, loser = (a, b) if a_wins else (b, a)
                advancing.append(winner)
                eliminated_in[loser] = rounds
            if len(players) % 2:
                advancing.append(players[-1])  # bye
            players = advancing
            rounds += 1
        eliminated_in[players[0]] = rounds
        self.last_comparisons = comparisons
        return [eliminated_in[i] / rounds for i in range(len(texts))]


def _pairwise_from_judge(judge: dict[str, Any], both_orders: bool = True) -> PairwisePreference:
    from reinforge.rewards.judge import PairwiseJudge

    return PairwisePreference(PairwiseJudge(**judge), both_orders=both_orders)


def _tournament_from_judge(judge: dict[str, Any], seed: int = 0) -> Tournament:
    from reinforge.rewards.judge import PairwiseJudge

    return Tournament(PairwiseJudge(**judge), seed=seed)


# By name, for config: the pairwise ones take `judge: {base_url, model, ...}` (PairwiseJudge params).
GROUP_REWARD_FUNCTIONS: dict[str, Callable[..., GroupRewardFn]] = {
    "majority_vote": MajorityVote,
    "pairwise_preference": _pairwise_from_judge,
    "tournament": _tournament_from_judge,
}


def build_group_reward_fn(fn: str, params: dict[str, Any]) -> GroupRewardFn:
    if fn not in GROUP_REWARD_FUNCTIONS:
        raise ValueError(f"unknown group reward function {fn!r}; valid: {', '.join(sorted(GROUP_REWARD_FUNCTIONS))}")
    try:
        return GROUP_REWARD_FUNCTIONS[fn](**params)
    except TypeError as err:
        raise ValueError(f"group reward function {fn!r}: bad params {params}: {err}") from None
