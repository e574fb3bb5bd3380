"""Fixtures shared by the reward tests."""

from __future__ import annotations

import pytest

from reinforge.rewards.scorer import RewardScorer


@pytest.fixture
def scorers():
    made: list[RewardScorer] = []

    def make(*args, **kwargs) -> RewardScorer:
        # Threads unless a test asks for processes: these tests are about scoring logic, with
        # closures as reward fns; test_reward_isolation.py covers the worker processes.
        kwargs.setdefault("isolation", "thread")
        made.append(RewardScorer(*args, **kwargs))
        return made[-1]

    yield make
    for s in made:
        s.close()
