"""rollout_groups: group layout, ids, spans and versions, with a scripted engine and the real one."""

from __future__ import annotations

import pytest

from reinforge.engines.base import Generation, SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.rollout.episodes import rollout_groups
from reinforge.tasks.task import Task

TASKS = [Task(id="a", prompt="1+2=", answer="3"), Task(id="b", prompt="35+7=", answer="42"), Task(id="c", prompt="9=", answer="9")]


class ScriptedEngine:
    """Returns a distinct, known generation for each row and records what it was asked."""

    def __init__(self, version: int):
        self.policy_version = version
        self.calls = []

    def generate(self, prompts, params, seed=None):
        self.calls.append((prompts, params, seed))
        return [
            Generation(
                token_ids=[40 + row] * (1 + row % 3),
                logprobs=[-0.5 - row] * (1 + row % 3),
                finish_reason="stop" if row % 2 else "length",
                policy_version=self.policy_version,
                errors=["boom"] if row == 4 else [],
            )
            for row in range(len(prompts))
        ]

    def sync_weights(self, version):
        self.policy_version = version


def test_groups_are_consecutive_and_fields_come_from_the_generation(tokenizer) -> None:
    env = SingleTurnEnv(tokenizer, "raw")
    engine = ScriptedEngine(version=9)
    params = SamplingParams(max_new_tokens=4)
    group_size = 4
    out = rollout_groups(engine, env, TASKS, group_size, params, seed=17, first_group_id=100)

    # one batched engine call, each prompt repeated group_size times in a row, seed passed through
    assert len(engine.calls) == 1
    prompts, got_params, seed = engine.calls[0]
    assert prompts == [env.prompt_ids(t) for t in TASKS for _ in range(group_size)]
    assert got_params is params and seed == 17

    assert len(out) == len(TASKS) * group_size
    assert [t.group_id for t in out] == [100] * 4 + [101] * 4 + [102] * 4
    assert [t.task_id for t in out] == ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    for row, t in enumerate(out):
        prompt = env.prompt_ids(TASKS[row // group_size])
        sampled = [40 + row] * (1 + row % 3)
        assert t.prompt_length == len(prompt)
        assert t.token_ids == prompt + sampled
        assert t.loss_mask == [False] * len(prompt) + [True] * len(sampled)
        assert t.behaviour_logprobs == [0.0] * len(prompt) + [-0.5 - row] * len(sampled)
        assert t.turn_spans == [(len(prompt), len(prompt) + len(sampled))]
        assert t.num_sampled_tokens == len(sampled)
        assert t.policy_version == 9
        assert t.finish_reason == ("stop" if row % 2 else "length")
        assert t.response_text == tokenizer.decode(sampled, skip_special_tokens=True)
        assert t.errors == (["boom"] if row == 4 else [])
        assert t.rewards == {} and t.reward == 0.0


def test_rollout_with_the_torch_engine(tokenizer, sharp_nano_model) -> None:
    env = SingleTurnEnv(tokenizer, "raw")
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    engine.sync_weights(5)
    params = SamplingParams(max_new_tokens=5, temperature=1.0, stop_token_ids=(tokenizer.eos_token_id,))
    out = rollout_groups(engine, env, TASKS, group_size=3, params=params, seed=3)

    assert [t.group_id for t in out] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for row, t in enumerate(out):
        prompt = tokenizer(TASKS[row // 3].prompt).input_ids
        assert prompt[0] == tokenizer.bos_token_id
        assert t.prompt_length == len(prompt) and t.token_ids[: len(prompt)] == prompt
        assert t.turn_spans == [(len(prompt), len(t.token_ids))]
        assert 1 <= t.num_sampled_tokens <= 5
        assert t.policy_version == 5
        assert t.finish_reason in {"stop", "length"}
        assert all(lp < 0 for lp in t.behaviour_logprobs[len(prompt) :])
    # a group holds different samples of the same prompt
    assert len({tuple(t.token_ids) for t in out[:3]}) > 1
    # the same seed reproduces the rollout exactly
    again = rollout_groups(engine, env, TASKS, group_size=3, params=params, seed=3)
    assert [t.token_ids for t in again] == [t.token_ids for t in out]


def test_single_turn_trajectory_masks_only_the_sampled_tokens() -> None:
    from reinforge.rollout.trajectory import single_turn_trajectory

    t = single_turn_trajectory("t", [1, 2, 3], [7, 8], [-0.5, -0.25], "78", "length", group_id=4, policy_version=2)
    assert t.token_ids == [1, 2, 3, 7, 8] and t.loss_mask == [False, False, False, True, True]
    assert t.behaviour_logprobs == [0.0, 0.0, 0.0, -0.5, -0.25] and t.turn_spans == [(3, 5)]
    assert (t.prompt_length, t.group_id, t.policy_version, t.finish_reason) == (3, 4, 2, "length")
    with pytest.raises(ValueError, match="2 sampled tokens but 1 log-probs"):
        single_turn_trajectory("t", [1], [7, 8], [-0.5], "78")
