"""What a run tells its user early: an evaluation counter that moves, and a loud warning when every
response of the first step scored zero."""

from __future__ import annotations

import pytest

from reinforge.config import load_config
from reinforge.engines.base import SamplingParams
from reinforge.engines.torch_engine import TorchEngine
from reinforge.rollout.trajectory import single_turn_trajectory
from reinforge.telemetry.progress import ProgressDisplay
from reinforge.trainer.eval_progress import EvalCounter, eval_episode_total
from reinforge.trainer.zero_reward import zero_reward_warning


def test_the_counter_moves_inside_a_call_and_changes_no_sample(tokenizer, sharp_nano_model, arithmetic_prompts) -> None:
    engine = TorchEngine(sharp_nano_model, tokenizer.pad_token_id)
    prompts = arithmetic_prompts * 4  # 20 rows
    # A third of the vocabulary stops a row: rows end at different steps, as answers do.
    params = SamplingParams(max_new_tokens=12, temperature=1.0, stop_token_ids=tuple(range(0, len(tokenizer), 3)))
    expected = engine.generate(prompts, params, seed=3)
    seen: list[int] = []
    counter = EvalCounter(engine, seen.append)
    got = counter.generate(prompts, params, seed=3)
    assert [(g.token_ids, g.logprobs, g.finish_reason) for g in got] == [(g.token_ids, g.logprobs, g.finish_reason) for g in expected]
    assert seen[-1] == len(prompts) == counter.done and len(seen) > 2  # it moved within the call
    assert seen == sorted(seen)
    counter.generate(prompts[:3], params, seed=4)
    assert counter.done == len(prompts) + 3  # calls add up (greedy, then the samples)
    assert counter.pad_token_id == engine.pad_token_id  # anything else is the engine's own


def test_the_total_is_known_for_single_turn_envs_only() -> None:
    class SingleTurn:
        max_turns = 1

    class Tools:
        max_turns = 4

    class Agents:
        max_turns = 1

        def run_groups(self):
            pass

    assert eval_episode_total(SingleTurn(), 150, 4) == 750
    assert eval_episode_total(Tools(), 150, 4) is None and eval_episode_total(Agents(), 150, 4) is None


def trajectories(rewards, finish="stop"):
    out = []
    for i, reward in enumerate(rewards):
        t = single_turn_trajectory("t", [1], [2, 3], [-0.1, -0.2], "x", finish)
        t.reward = reward
        out.append(t)
    return out


def test_the_warning_names_the_components_and_what_to_check() -> None:
    cfg = load_config("default", ["rollout.max_new_tokens=8"])
    warning = zero_reward_warning(trajectories([0.0] * 4, finish="length"), cfg)
    assert "every one of the first step's 4 responses scored 0" in warning
    assert "correct (verifier)" in warning and "format (format)" in warning
    assert "reinforge eval --model" in warning and "rollout.prompt_format=raw" in warning
    assert "rollout.max_new_tokens=8 (100% of the responses were cut there)" in warning
    assert zero_reward_warning(trajectories([0.0, 0.0, 0.1, 0.0]), cfg) is None
    assert zero_reward_warning([], cfg) is None
    failed = trajectories([0.0, 1.0])
    failed[1].reward_failures = {"correct": "timeout"}  # a failed reward is no score: left out
    assert "first step's 1 responses" in zero_reward_warning(failed, cfg)


def test_a_run_whose_first_step_scores_nothing_says_so_and_labels_its_evaluations(tmp_path, monkeypatch, capsys) -> None:
    from reinforge.run.pipeline import run_training

    started, advanced = [], []
    monkeypatch.setattr(ProgressDisplay, "eval_started", lambda self, total: started.append(total))
    monkeypatch.setattr(ProgressDisplay, "eval_advanced", lambda self, done: advanced.append(done))
    cfg = load_config("default", [
        "model.preset=nano", "sft.steps=0", "task.train_size=20", "task.eval_size=6", "trainer.steps=1",
        "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=3", "eval.samples=1",
        "reward.components=[{name: correct, fn: verifier}]",  # a random nano model never sums right
        "telemetry.progress=false", "telemetry.tensorboard=false", "trainer.checkpoint_every=0",
        f"trainer.output_dir={tmp_path / 'run'}",
    ])
    outcome = run_training(cfg)
    assert outcome.rl.rewards == [0.0]
    err = capsys.readouterr().err
    assert "reinforge: WARNING: every one of the first step's 4 responses scored 0 (reward components: correct (verifier))" in err
    assert started == [12, 12]  # before step 1 and at the end: 6 tasks x (greedy + 1 sample)
    assert advanced and advanced[-1] == 12 and max(advanced) == 12


@pytest.mark.parametrize("reward", [1.0, -1.0])
def test_a_first_step_with_any_nonzero_reward_is_quiet(reward) -> None:
    assert zero_reward_warning(trajectories([0.0, reward]), load_config("default")) is None
