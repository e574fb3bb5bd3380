"""Per-turn rewards into the batch: layout, Clip/Delta, G-RA gating, void-turn filtering, turn_rloo."""

from __future__ import annotations

import pytest
import torch

from reinforge.algos.advantages import get_estimator
from reinforge.config import load_config
from reinforge.rollout.trajectory import Trajectory
from reinforge.trainer.advantage_step import prepare_batch
from reinforge.trainer.turn_credit import shaped_turn_rewards, turn_layout


def episode(group: int, reward: float, turn_rewards: list[float], void: int = 0) -> Trajectory:
    """Prompt of 2 tokens, then per turn: 2 sampled tokens and 1 observation token (not after the last)."""
    ids, mask, spans = [1, 2], [False, False], []
    for k in range(len(turn_rewards)):
        start = len(ids)
        ids += [10 + k, 11 + k]
        mask += [True, True]
        spans.append((start, len(ids)))
        if k < len(turn_rewards) - 1:
            ids.append(50)
            mask.append(False)
    return Trajectory(
        task_id=f"t{group}", group_id=group, token_ids=ids, loss_mask=mask,
        behaviour_logprobs=[-0.5 if m else 0.0 for m in mask], turn_spans=spans, prompt_length=2,
        response_text="", policy_version=0, finish_reason="stop", rewards={"correct": reward}, reward=reward,
        turn_rewards=turn_rewards, stats={"void_turns": void},
    )


def algo(*overrides: str):
    return load_config("default", list(overrides)).algo


def test_layout_maps_each_sampled_token_to_its_turn() -> None:
    t = episode(0, 1.0, [0.1, 0.2])  # ids: p p a a o a a
    layout = turn_layout([t], len(t.token_ids) - 1, algo())
    # position i predicts token i+1: tokens 2,3 are turn 0 and 5,6 are turn 1
    assert layout.index.tolist() == [[-1, 0, 0, -1, 1, 1]]
    assert layout.rewards.tolist() == [[0.1, 0.2]] and layout.counts.tolist() == [2]


@pytest.mark.parametrize(
    "overrides, outcome, expected",
    [
        ([], 0.0, [0.5, -0.25, 1.0]),
        (["algo.turn_reward_fix=clip"], 0.0, [0.0, -0.25, 0.0]),  # min(r, 0)
        (["algo.turn_reward_fix=delta"], 0.0, [0.75, -1.25, 0.0]),  # r_t - r_{t+1}, last dropped
        # potentials [0, 0.5, -0.25, 1] with gamma 0.5: 0.5*0.5 - 0, 0.5*-0.25 - 0.5, 0.5*1 + 0.25
        (["algo.turn_reward_fix=potential", "algo.gamma=0.5"], 0.0, [0.25, -0.625, 0.75]),
        (["algo.turn_reward_gate=1.0"], 0.0, [0.0, 0.0, 0.0]),  # G-RA: outcome below the gate
        (["algo.turn_reward_gate=1.0"], 1.0, [0.5, -0.25, 1.0]),  # outcome reaches it
        (["algo.turn_reward_fix=delta", "algo.turn_reward_gate=0.5"], 1.0, [0.75, -1.25, 0.0]),
    ],
)
def test_turn_reward_shaping(overrides, outcome, expected) -> None:
    t = episode(0, outcome, [0.5, -0.25, 1.0])
    assert shaped_turn_rewards(t, algo(*overrides)) == pytest.approx(expected)


def test_episode_estimators_see_turn_rewards_summed_and_turn_rloo_sees_them_per_turn() -> None:
    batch_in = [episode(0, 1.0, [0.25, 0.0]), episode(0, 0.0, [0.5])]
    grpo_batch, metrics = prepare_batch(batch_in, algo(), get_estimator("grpo"), {"correct": 1.0}, 0, None, None, None)
    # episode rewards 1.25 and 0.5 (outcome + turn rewards), normalized within the group
    r = torch.tensor([1.25, 0.5], dtype=torch.float64)
    assert grpo_batch.advantages.tolist() == pytest.approx(((r - r.mean()) / (r.std() + 1e-6)).tolist(), abs=1e-5)
    assert metrics["turn_reward_mean"] == pytest.approx(0.375)

    turn_batch, _ = prepare_batch(
        batch_in, algo("algo.advantage=turn_rloo", "algo.gamma=1.0"), get_estimator("turn_rloo"), {"correct": 1.0}, 0, None, None, None
    )
    # E0: G = [1.25, 1.0]; E1: G = [0.5]. Baselines: E0 turn 0 and 1 -> 0.5; E1 -> E0's G[0] = 1.25
    adv = turn_batch.advantages
    assert adv[0, 1].item() == pytest.approx(0.75) and adv[0, 4].item() == pytest.approx(0.5)
    assert adv[1, 1].item() == pytest.approx(-0.75)
    assert adv[0, 0].item() == 0 and adv[0, 3].item() == 0  # prompt and observation get nothing


def test_void_turn_episodes_are_left_out_of_the_loss() -> None:
    batch_in = [episode(0, 1.0, [0.0], void=0), episode(0, 0.0, [0.0], void=1)]
    batch, metrics = prepare_batch(batch_in, algo("algo.drop_void_turns=true"), get_estimator("grpo"), {"correct": 1.0}, 0, None, None, None)
    assert batch.loss_mask[0].any() and not batch.loss_mask[1].any()
    assert metrics["void_dropped_frac"] == 0.5
    kept, _ = prepare_batch(batch_in, algo(), get_estimator("grpo"), {"correct": 1.0}, 0, None, None, None)
    assert kept.loss_mask[1].any()
