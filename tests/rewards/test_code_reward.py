"""Code rewards: the response's code runs against the task's tests in the sandbox."""

from __future__ import annotations

import time

import pytest

from reinforge.rewards.builtin import REWARD_FUNCTIONS, build_reward_fn
from reinforge.rewards.code_reward import CodeTestsReward, DifficultyWeightedTests, extract_code
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task

TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 4", "assert add(0, 0) == 0"]


def task(tests=TESTS, task_id="add", **metadata) -> Task:
    return Task(id=task_id, prompt="write add(a, b)", answer="", verifier="exact",
                metadata={"tests": tests, **metadata})


def trajectory(text: str) -> Trajectory:
    return Trajectory(task_id="add", group_id=0, token_ids=[], loss_mask=[], behaviour_logprobs=[],
                      turn_spans=[], prompt_length=0, response_text=text, policy_version=0, finish_reason="stop")


def test_extract_code_takes_the_last_python_fence() -> None:
    assert extract_code("def f(): pass") == "def f(): pass"
    text = "first\n```python\nx = 1\n```\nthen\n```python\nx = 2\n```\n"
    assert extract_code(text) == "x = 2\n"
    assert extract_code("```python\ny = 3\n") == "y = 3\n"  # cut off before the closing fence


def test_correct_partial_wrong_and_malformed_code() -> None:
    reward = CodeTestsReward(timeout_s=5)
    correct = "Here you go:\n```python\ndef add(a, b):\n    return a + b\n```"
    partial = "```python\ndef add(a, b):\n    return a + b if a > 0 else 99\n```"  # passes tests 0 and 2
    wrong = "def add(a, b):\n    return a - b\n"
    malformed = "```python\ndef add(a, b)\n    return a + b\n```"
    assert reward(task(), trajectory(correct)) == 1.0
    assert reward(task(), trajectory(partial)) == pytest.approx(0.5)
    assert reward(task(), trajectory(wrong)) == pytest.approx(0.25)  # only add(0, 0) == 0 holds
    assert reward(task(), trajectory(malformed)) == 0.0
    weighted = task(test_weights=[3, 1, 0, 0])
    assert reward(weighted, trajectory(partial)) == pytest.approx(0.75)


def test_faked_output_and_early_exit_earn_nothing() -> None:
    reward = CodeTestsReward(timeout_s=5)
    fake = "import os\nprint('0 0 1')\nos._exit(0)\n"
    assert reward(task(), trajectory(fake)) == 0.0
    assert reward(task(), trajectory("raise SystemExit(0)")) == 0.0


def test_hanging_solution_scores_zero_within_the_timeout() -> None:
    reward = CodeTestsReward(timeout_s=1.5)
    start = time.monotonic()
    assert reward(task(), trajectory("while True:\n    pass\n")) == 0.0
    assert time.monotonic() - start < 1.5 + 2.0
    # a hang in the third test keeps the two results before it
    hang_later = "def add(a, b):\n    while a == 2:\n        pass\n    return a + b\n"
    assert reward(task(), trajectory(hang_later)) == pytest.approx(0.5)


def test_bad_task_data_raises() -> None:
    with pytest.raises(ValueError, match="tests"):
        CodeTestsReward()(task(tests=[]), trajectory("x = 1"))
    with pytest.raises(ValueError, match="test_weights"):
        CodeTestsReward()(task(test_weights=[1, 2]), trajectory("def add(a, b): return a + b"))


def test_difficulty_weights_move_toward_the_hard_test() -> None:
    reward = DifficultyWeightedTests(timeout_s=5)
    two = task(tests=["assert f(1) == 1", "assert f(2) == 5"], task_id="hard")
    easy_only = "def f(x):\n    return x\n"
    # w_i ∝ (fails_i + 1) / (attempts_i + 2), using the counts before each call
    assert reward.weights(two) == pytest.approx([0.5, 0.5])
    assert reward(two, trajectory(easy_only)) == pytest.approx(0.5)  # 1/2 vs 1/2
    assert reward(two, trajectory(easy_only)) == pytest.approx(1 / 3)  # 1/3 vs 2/3
    assert reward(two, trajectory(easy_only)) == pytest.approx(1 / 4)  # 1/4 vs 3/4
    assert reward.weights(two) == pytest.approx([1 / 5, 4 / 5])
    hard_only = "def f(x):\n    return 5\n"
    assert reward(two, trajectory(hard_only)) == pytest.approx(0.8)
    # stats now: easy 1 fail / 4 attempts, hard 3 fails / 4 attempts -> 2/6 vs 4/6
    assert reward.weights(two) == pytest.approx([1 / 3, 2 / 3])
    other = task(tests=["assert f(1) == 1", "assert f(2) == 5"], task_id="other")
    assert reward.weights(other) == pytest.approx([0.5, 0.5])  # statistics are per task


def test_registered_by_name() -> None:
    assert isinstance(build_reward_fn("code_tests", {"timeout_s": 2}), CodeTestsReward)
    fn = REWARD_FUNCTIONS["code_tests_difficulty"]()
    assert isinstance(fn, DifficultyWeightedTests) and fn.deterministic is False


def test_difficulty_statistics_survive_a_checkpoint_round_trip():
    from reinforge.rewards.code_reward import DifficultyWeightedTests

    learned = DifficultyWeightedTests()
    learned._stats = {("t", 0): [1, 3], ("t", 1): [2, 2]}
    restored = DifficultyWeightedTests()
    restored.load_state_dict(learned.state_dict())
    assert restored._stats == learned._stats
