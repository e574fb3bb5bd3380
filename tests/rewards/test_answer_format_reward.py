"""`answer_format`: the strict answer format as a reward component of its own, next to a verifier
that reads the answer in any form."""

from __future__ import annotations

import pytest

from reinforge.cli import main
from reinforge.rewards.builtin import AnswerFormatReward, VerifierReward, build_component
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.rollout.trajectory import Trajectory, single_turn_trajectory
from reinforge.tasks.task import Task

TASKS = {
    "tags": Task(id="tags", prompt="3+4=", answer="7", verifier="numeric", answer_extractor="answer_tags"),
    "auto": Task(id="auto", prompt="3+4=", answer="7", verifier="numeric", answer_extractor="auto"),
    "word": Task(id="word", prompt="Capital of France?", answer="Paris", answer_extractor="auto"),
}


def traj(task_id: str, response: str, finish_reason: str = "stop") -> Trajectory:
    return single_turn_trajectory(task_id, [1, 2], [5] * 3, [-0.1] * 3, response, finish_reason)


@pytest.mark.parametrize(
    ("task_id", "response", "finish", "score"),
    [
        ("tags", "3 + 4 = 7. <answer>7</answer>", "stop", 1.0),
        ("tags", "3 + 4 = 7. The answer is 7.", "stop", 0.0),  # right, but not in the tags the task asks for
        ("tags", "<answer>7</answer>", "length", 0.0),  # ran out of tokens: the policy did not end it
        ("auto", "3 + 4 = 7. The answer is 7.", "stop", 1.0),  # auto: ending on the number is a form (numeric task)
        ("auto", "The answer is 7, I think", "stop", 0.0),
        ("auto", "So \\boxed{7}.", "stop", 1.0),
        ("word", "The answer is Paris", "stop", 0.0),  # not numeric: only tags, boxed or #### count
        ("word", "<answer>Paris</answer>", "stop", 1.0),
    ],
)
def test_the_tasks_own_extractor_sets_the_form(task_id: str, response: str, finish: str, score: float) -> None:
    reward, is_group = build_component("answer_format", {})
    assert not is_group
    assert reward(TASKS[task_id], traj(task_id, response, finish)) == score


def test_a_params_extractor_overrides_the_tasks_and_require_stop_can_be_off() -> None:
    boxed = AnswerFormatReward(extractor="boxed", require_stop=False)
    assert boxed(TASKS["tags"], traj("tags", "\\boxed{7}", "length")) == 1.0
    assert boxed(TASKS["tags"], traj("tags", "<answer>7</answer>")) == 0.0
    with pytest.raises(ValueError, match="unknown extractor 'box'; valid: response, auto"):
        AnswerFormatReward(extractor="box")


def test_format_and_correctness_are_separate_components() -> None:
    scorer = RewardScorer(
        [NamedReward("correct", VerifierReward(), 1.0), NamedReward("format", AnswerFormatReward(), 0.2)], isolation="thread"
    )
    try:
        batch = [traj("tags", "It is 7. <answer>7</answer>"), traj("tags", "It is 7, so <answer>7</answer> hmm"),
                 traj("tags", "<answer>8</answer>"), traj("auto", "4 and 3 make 7.")]
        scorer.score(TASKS, batch)
    finally:
        scorer.close()
    assert [t.rewards for t in batch] == [
        {"correct": 1.0, "format": 1.0},
        {"correct": 1.0, "format": 0.0},  # right answer, loose form: correct without the format bonus
        {"correct": 0.0, "format": 1.0},  # strict form, wrong answer
        {"correct": 1.0, "format": 1.0},
    ]


def test_a_bad_extractor_param_is_refused_before_compute(capsys) -> None:
    component = "reward.components=[{name: correct, fn: verifier}, {name: form, fn: answer_format, params: {extractor: tag}}]"
    assert main(["config", "validate", "default", component]) == 2
    assert "reward.components[1] (form): answer_format reward: unknown extractor 'tag'" in capsys.readouterr().err
