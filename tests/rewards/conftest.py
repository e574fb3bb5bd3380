"""Fixtures shared by the reward tests."""

from __future__ import annotations

import pytest

from reinforge.rewards.scorer import RewardScorer


@pytest.fixture
def scorers():
    made: list[RewardScorer] = []

    def make(*args, **kwargs) -> RewardScorer:
        made.append(RewardScorer(*args, **kwargs))
        return made[-1]

    yield make
    for s in made:
        s.close()
