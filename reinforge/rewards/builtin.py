"""Built-in reward functions, registered by name for `reward.components[].fn`."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from reinforge.import_paths import is_import_path
from reinforge.tasks.answer_extraction import numeric_reference, strict_form
from reinforge.rewards.base import RewardFn
from reinforge.rewards.code_reward import CodeTestsReward, DifficultyWeightedTests
from reinforge.rewards.env_reward import EnvReward
from reinforge.rewards.judge import RubricJudge
from reinforge.rewards.shaping import LengthPenalty, OverlongPenalty
from reinforge.tasks.verifiers import verify
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import ANSWER_EXTRACTORS, Task


class VerifierReward:
    """1.0 when the task's own verifier accepts the response, else its partial score or 0."""

    deterministic = True  # same (task, response) -> same score: the scorer may cache it

    def __call__(self, task: Task, trajectory: Trajectory) -> float:
        return float(verify(task, trajectory.response_text))


class FormatReward:
    """1.0 when the response matches `pattern` (full match, surrounding space ignored) and, if
    `require_stop`, the policy ended it itself instead of running out of tokens."""

    deterministic = True

    def __init__(self, pattern: str, require_stop: bool = True):
        try:
            self.pattern = re.compile(pattern, re.DOTALL)
        except re.error as err:
            raise ValueError(f"format reward: invalid regex {pattern!r}: {err}") from None
        self.require_stop = require_stop

    def __call__(self, task: Task, trajectory: Trajectory) -> float:
        if self.require_stop and trajectory.finish_reason != "stop":
            return 0.0
        return 1.0 if self.pattern.fullmatch(trajectory.response_text.strip()) else 0.0


class AnswerFormatReward:
    """1.0 when the response states its final answer in the strict form of an answer extractor, as
    the last thing it writes (`<answer>X</answer>`; `\\boxed{X}`; a last line `#### X`; ending on
    the number for last_number: answer_extraction.strict_form), and, if `require_stop`, the policy
    ended the response itself. Correctness is the verifier's business: the verifier reads the answer
    in any form, and this component rewards the form, so a run can weigh both.

    `extractor`: the form asked for; default (None) the task's own `answer_extractor`, where `auto`
    accepts any of the forms (the bare number only for numeric tasks)."""

    deterministic = True

    def __init__(self, extractor: str | None = None, require_stop: bool = True):
        if extractor is not None and extractor not in ANSWER_EXTRACTORS:
            raise ValueError(f"answer_format reward: unknown extractor {extractor!r}; valid: {', '.join(ANSWER_EXTRACTORS)}")
        self.extractor, self.require_stop = extractor, require_stop

    def __call__(self, task: Task, trajectory: Trajectory) -> float:
        if self.require_stop and trajectory.finish_reason != "stop":
            return 0.0
        form = self.extractor or task.answer_extractor
        return 1.0 if strict_form(trajectory.response_text, form, numeric=numeric_reference(task)) else 0.0


def reward_model(**params: Any) -> RewardFn:
    """A RewardModelReward, imported on use: torch and transformers take seconds to import, and
    reward worker processes (which never run a reward model) should start fast."""
    from reinforge.rewards.reward_model import RewardModelReward

    return RewardModelReward(**params)


REWARD_FUNCTIONS: dict[str, Callable[..., RewardFn]] = {
    "verifier": VerifierReward,
    "format": FormatReward,
    "answer_format": AnswerFormatReward,
    "overlong": OverlongPenalty,
    "length": LengthPenalty,
    "reward_model": reward_model,
    "rubric_judge": RubricJudge,
    "code_tests": CodeTestsReward,
    "code_tests_difficulty": DifficultyWeightedTests,
    "env_reward": EnvReward,
}


def build_reward_fn(fn: str, params: dict[str, Any]) -> RewardFn:
    if fn not in REWARD_FUNCTIONS:
        raise ValueError(f"unknown reward function {fn!r}; valid: {', '.join(sorted(REWARD_FUNCTIONS))}")
    try:
        return REWARD_FUNCTIONS[fn](**params)
    except TypeError as err:
        raise ValueError(f"reward function {fn!r}: bad params {params}: {err}") from None


def build_component(fn: str, params: dict[str, Any]) -> tuple[Callable, bool]:
    """A per-sample reward fn or a group reward fn (scored on a whole group at once), by built-in
    name or by import path (rewards.user_rewards); returns (callable, is_group)."""
    from reinforge.rewards.group import GROUP_REWARD_FUNCTIONS, build_group_reward_fn

    if is_import_path(fn):
        from reinforge.rewards.user_rewards import build_user_reward

        return build_user_reward(fn, params)
    if fn in GROUP_REWARD_FUNCTIONS:
        return build_group_reward_fn(fn, params), True
    if fn not in REWARD_FUNCTIONS:
        valid = sorted([*REWARD_FUNCTIONS, *GROUP_REWARD_FUNCTIONS])
        raise ValueError(f"unknown reward function {fn!r}; built-in: {', '.join(valid)}; or your own as 'package.module:name' or './file.py:name'")
    return build_reward_fn(fn, params), False
