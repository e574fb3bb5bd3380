"""An episode in several pieces is one episode: scored once, one advantage, dropped whole."""

from __future__ import annotations

import math
import pickle

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.types import AdvantageInputs, AdvantageOutput
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.import_paths import ImportPathError
from reinforge.rewards.user_rewards import AgentResultReward, build_user_reward, reward_from_object
from reinforge.rollout.episode_parts import AGENT_ERROR, EpisodePartsError, lead_rows
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task
from reinforge.trainer.agent_failures import drop_failed_episodes
from reinforge.trainer.collect import count_groups, first_groups
from reinforge.trainer.episode_advantages import per_episode_advantages


def piece(group: int, part: int = 0, reward: float = 0.0, text: str = "", finish: str = "stop", task: str = "t") -> Trajectory:
    return Trajectory(
        task_id=task, group_id=group, token_ids=[1, 2, 3], loss_mask=[False, True, True], behaviour_logprobs=[0.0, -1.0, -1.0],
        turn_spans=[(1, 3)], prompt_length=1, response_text=text, policy_version=0, finish_reason=finish,
        reward=reward, episode_part=part,
    )


def test_grpo_advantage_is_computed_once_per_episode_hand_computed():
    # One group of 3 episodes with rewards 1, 0, 0; the first came as two pieces (rows 0 and 1).
    rows = [piece(0, 0, 1.0), piece(0, 1, 1.0), piece(0, 0, 0.0), piece(0, 0, 0.0)]
    inputs = AdvantageInputs(
        rewards=torch.tensor([1.0, 1.0, 0.0, 0.0], dtype=torch.float64), group_ids=torch.zeros(4, dtype=torch.long),
        mask=torch.ones(4, 2, dtype=torch.bool),
    )
    out, untrained = per_episode_advantages(get_estimator("grpo").fn, inputs, rows)
    # mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3)
    std = math.sqrt(1 / 3)
    lead, other = (2 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6)
    assert out.advantages.tolist() == pytest.approx([lead, lead, other, other], rel=1e-6)
    assert untrained is None
    # counting pieces as episodes would give +-0.866 (mean 1/2): not what an episode is worth
    assert lead == pytest.approx(1.1547, abs=1e-4)


def test_a_per_token_estimator_trains_the_lead_piece_and_leaves_the_others_out():
    def per_token(inputs: AdvantageInputs) -> AdvantageOutput:
        return AdvantageOutput(inputs.rewards[:, None].expand_as(inputs.mask).float() * inputs.mask)

    rows = [piece(0, 0, 2.0), piece(0, 1, 2.0), piece(1, 0, 3.0)]
    inputs = AdvantageInputs(rewards=torch.tensor([2.0, 2.0, 3.0]), group_ids=torch.tensor([0, 0, 1]), mask=torch.ones(3, 2, dtype=torch.bool))
    out, untrained = per_episode_advantages(per_token, inputs, rows)
    assert out.advantages.tolist() == [[2.0, 2.0], [0.0, 0.0], [3.0, 3.0]]
    assert untrained.tolist() == [False, True, False] and out.metrics["split_pieces_untrained"] == 1.0


def test_a_piece_must_follow_its_lead():
    with pytest.raises(EpisodePartsError, match="lead piece"):
        lead_rows([piece(0, 1)])
    assert lead_rows([piece(0), piece(0, 1), piece(0, 2), piece(1)]) == [0, 0, 0, 3]


def test_the_scorer_scores_lead_pieces_and_copies_their_reward():
    calls = []

    def reward(task, trajectory):
        calls.append(trajectory.response_text)
        return float(trajectory.response_text == task.answer)

    scorer = RewardScorer([NamedReward("correct", reward, 1.0)], isolation="thread")
    try:
        rows = [piece(0, 0, text="7"), piece(0, 1, text="7"), piece(0, 0, text="8"), piece(0, 0, finish=AGENT_ERROR)]
        metrics = scorer.score({"t": Task(id="t", prompt="3+4=", answer="7")}, rows)
    finally:
        scorer.close()
    assert sorted(calls) == ["7", "8"]  # one call per scored episode: no piece, no failed agent
    assert [r.reward for r in rows] == [1.0, 1.0, 0.0, 0.0] and rows[1].rewards == {"correct": 1.0}
    assert rows[3].rewards == {}  # not scored at all, not scored 0
    assert metrics["reward"] == 0.5  # the two scored episodes


def test_failed_agent_episodes_leave_the_loss_alone_and_small_groups_go():
    rows = [
        piece(0, 0), piece(0, 1), piece(0, 0, finish=AGENT_ERROR), piece(0, 1, finish="stop"), piece(0, 0),  # group 0: 1 of 3 failed
        piece(1, 0, finish=AGENT_ERROR), piece(1, 0, finish=AGENT_ERROR), piece(1, 0),  # group 1: 2 of 3 failed
    ]
    kept, metrics = drop_failed_episodes(rows, min_group_size=2)
    assert kept == [rows[0], rows[1], rows[4]]  # the failed episode with its piece; group 1 left with 1 < 2 episodes
    assert metrics == {"agent_dropped": 4.0, "agent_groups_dropped": 1.0}
    kept, metrics = drop_failed_episodes(rows, min_group_size=1)
    assert kept == [rows[0], rows[1], rows[4], rows[7]] and metrics["agent_dropped"] == 3.0


def test_collection_counts_groups_not_rows():
    rows = [piece(5), piece(5, 1), piece(5), piece(6), piece(6), piece(7)]
    assert count_groups(rows) == 3
    assert first_groups(rows, 2) == rows[:5]


def test_an_agents_reward_gets_its_result_and_messages():
    def agent_reward(task, result, transcript, bonus=0.0):
        return float(result["answer"] == task.answer) + bonus * len(transcript)

    fn, group = reward_from_object(agent_reward, {"bonus": 0.5})
    assert isinstance(fn, AgentResultReward) and not group
    trajectory = with_result({"answer": "7"})
    trajectory.transcript = [{"role": "user", "text": "3+4=", "message": {"role": "user", "content": "3+4="}},
                             {"role": "policy", "text": "7", "message": {"role": "assistant", "content": "7"}}]
    assert fn(Task(id="t", prompt="3+4=", answer="7"), trajectory) == 2.0  # 1 + 0.5 x 2 messages


def test_an_agents_reward_by_import_path_travels_to_a_reward_worker():
    fn, _ = build_user_reward(f"{__file__}:module_reward", {})
    sent = pickle.loads(pickle.dumps(fn))  # as the scorer sends it to a worker process
    assert sent(Task(id="t", prompt="", answer="x"), with_result("x")) == 1.0
    assert sent(Task(id="t", prompt="", answer="x"), with_result("y")) == 0.0


def test_a_reward_that_fits_neither_form_is_refused():
    with pytest.raises(ImportPathError, match="fn\\(task, trajectory"):
        reward_from_object(lambda task: 1.0, {})


def module_reward(task, result, transcript):
    return float(result == task.answer)


def with_result(result):
    trajectory = piece(0)
    trajectory.agent_result = result
    return trajectory
