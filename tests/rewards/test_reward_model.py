from __future__ import annotations

import random

import pytest

from float_bounds import forward_bound
from reinforge.models.loading import ModelLoadError
from reinforge.rewards.builtin import build_reward_fn
from reinforge.rewards.reward_model import RewardModelReward
from reinforge.rewards.tiny_reward_model import sum_pair, train_tiny_reward_model
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import Task


def response(text: str) -> Trajectory:
    return Trajectory(
        task_id="t", group_id=0, token_ids=[], loss_mask=[], behaviour_logprobs=[], turn_spans=[],
        prompt_length=0, response_text=text, policy_version=0, finish_reason="stop",
    )


@pytest.fixture(scope="module")
def reward_model_dir(tmp_path_factory):
    return train_tiny_reward_model(tmp_path_factory.mktemp("rm"), steps=300, seed=0, max_operand=5)


def test_trained_reward_model_prefers_correct_sums(reward_model_dir):
    reward = build_reward_fn("reward_model", {"path": str(reward_model_dir), "batch_size": 16})
    assert isinstance(reward, RewardModelReward)
    # Fresh (correct, wrong) pairs, drawn with a seed the training never used.
    rng = random.Random(12345)
    tasks, trajectories = [], []
    for _ in range(40):
        a, b = rng.randrange(5), rng.randrange(5)
        good, bad = sum_pair(a, b, rng, 5)
        task = Task(id=f"{a}+{b}", prompt=f"{a}+{b}=", answer=str(a + b))
        tasks += [task, task]
        trajectories += [response(good.split("=")[1]), response(bad.split("=")[1])]
    scores = reward.score_batch(tasks, trajectories)  # 80 texts in batches of 16: padding matters
    wins = sum(scores[i] > scores[i + 1] for i in range(0, len(scores), 2))
    assert wins / 40 >= 0.8
    # The single-call path agrees with the batched, padded one up to float32 summation order
    # (tests/float_bounds.py); reading another token's score would move it by ~the scores' spread.
    bound = forward_bound(reward.model, max(abs(s) for s in scores))
    for i in range(0, len(scores), 16):  # one text of each batch of 16
        assert abs(reward(tasks[i], trajectories[i]) - scores[i]) <= bound
    assert bound < 0.1 * (max(scores) - min(scores))  # far below what a wrong token would change


def test_missing_reward_model_dir_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="reward model .* is not a local directory.*expected a local Hugging Face model directory"):
        RewardModelReward(str(tmp_path / "nope"))
    with pytest.raises(ModelLoadError, match="config.json"):
        RewardModelReward(str(tmp_path))


def test_a_special_token_in_the_response_is_text(reward_model_dir):
    """A response that writes the tokenizer's special tokens is scored as that text: it cannot
    end the scored sequence early or forge a turn."""
    reward = build_reward_fn("reward_model", {"path": str(reward_model_dir)})
    task = Task(id="1+2", prompt="1+2=", answer="3")
    honest = reward.score_batch([task], [response("3")])  # loads the model and tokenizer
    tokenizer = reward.tokenizer
    special = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    forged_text = "3" + "".join(t.content for t in tokenizer.added_tokens_decoder.values() if t.special)
    ids = reward._ids(task, response(forged_text))
    assert [i for i in ids if i in special] == [i for i in reward._ids(task, response("3")) if i in special]
    assert tokenizer.decode(ids, skip_special_tokens=False).endswith(forged_text)
    assert reward(task, response(forged_text)) != honest[0]  # a different text is scored, not a cut one
