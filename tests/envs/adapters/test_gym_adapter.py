"""The gym-style adapter (gymnasium / GEM reset / step): prompt, replies, reward, seeds, bad shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.envs.adapters.gym_env import GymTextEnv
from reinforge.run.env_factory import build_env, check_env_config
from reinforge.rewards.builtin import build_component
from reinforge.tasks.task import Task
from exact_tokens import run_and_check_exact_tokens

ENVS = Path(__file__).parent / "foreign_envs.py"


def gym_cfg(name="GuessNumber", *overrides):
    return load_config("default", [f"env.type={ENVS}:{name}", "env.max_turns=3", "rollout.prompt_format=auto", *overrides])


def test_guess_number_episode_in_tokens_and_its_reward(tokenizer) -> None:
    cfg = gym_cfg("GuessNumber", "env.params={high: 9}")
    check_env_config(cfg)
    env = build_env(cfg, tokenizer)
    assert isinstance(env, GymTextEnv) and env.max_turns == 3
    task = Task(id="g", prompt="unused", answer="7")
    episode = env.episode()
    prompt = episode.reset(task)
    assert prompt == env.chat.prompt_ids([{"role": "user", "content": "Guess my number between 1 and 9."}])
    low = episode.step("3", "stop")
    assert not low.done and low.info == {"env_reward": 0.0} and low.observation_text == "higher"
    assert low.observation_ids == env.chat.observation_ids([{"role": "user", "content": "higher"}])
    right = episode.step("7", "stop")
    assert right.done and right.info == {"env_reward": 1.0, "finish_reason": "stop"} and right.observation_ids == []

    # the reward reaches the scorer as the `env_reward` component: the episode's summed env reward
    fn, group = build_component("env_reward", {})
    assert not group and not fn.deterministic
    from reinforge.rollout.trajectory import Trajectory

    traj = Trajectory("g", 0, [], [], [], [], 0, "7", 0, "stop", stats={"env_reward": 1.0})
    assert fn(task, traj) == 1.0
    with pytest.raises(ValueError, match="carries no env reward"):
        fn(task, Trajectory("g", 0, [], [], [], [], 0, "7", 0, "max_tokens"))


def test_seed_reaches_reset_and_a_group_shares_its_problem(tokenizer) -> None:
    env = build_env(gym_cfg("GuessNumber", "env.params={high: 1000}"), tokenizer)
    task = Task(id="s", prompt="", answer="", metadata={"seed": 12})
    first, second = env.episode(), env.episode()
    first.reset(task), second.reset(task)
    assert first.foreign.secret == second.foreign.secret
    # a reset without a seed parameter draws from the global RNG, seeded from the task and restored
    import random

    selfseeded = build_env(gym_cfg("SelfSeededGuess"), tokenizer)
    before = random.getstate()
    a, b = selfseeded.episode(), selfseeded.episode()
    a.reset(task), b.reset(task)
    assert a.foreign.secret == b.foreign.secret and random.getstate() == before
    other = selfseeded.episode()
    other.reset(Task(id="s2", prompt="", answer="", metadata={"seed": 13}))
    assert other.foreign.secret != a.foreign.secret


def test_guess_number_keeps_tokens_exact_with_the_real_engine(tokenizer, sharp_nano_model) -> None:
    env = build_env(gym_cfg("GuessNumber", "env.params={high: 9}"), tokenizer)
    tasks = [Task(id=f"t{i}", prompt="", answer=str(i + 3)) for i in range(3)]
    out = run_and_check_exact_tokens(env, tasks, sharp_nano_model, tokenizer)
    assert any(t.num_turns > 1 for t in out)  # replies were appended between sampled turns
    assert all("env_reward" in t.stats for t in out)


def test_a_class_missing_step_names_what_it_lacks_and_the_contract() -> None:
    with pytest.raises(ConfigError) as err:
        check_env_config(gym_cfg("NoStep"))
    message = str(err.value)
    assert "fits no env shape" in message and "as a reinforge Env it has no episode()" in message
    assert "as a gym-style text env it has no step()" in message
    assert "step(action: str) -> (observation, reward, terminated, truncated, info)" in message


def test_wrong_params_and_wrong_return_shapes_are_clear(tokenizer) -> None:
    with pytest.raises(ConfigError, match=r"env.type: .*GuessNumber, built as cls\(\*\*env.params\)"):
        check_env_config(gym_cfg("GuessNumber", "env.params={colour: red}"))
    env = build_env(gym_cfg("BadReset"), tokenizer)
    with pytest.raises(ValueError, match=r"reset returned 'hi'; a gym-style reset returns \(observation, info\)"):
        env.episode().reset(Task(id="x", prompt="", answer=""))


def test_env_reward_with_a_builtin_env_is_refused_up_front() -> None:
    cfg = load_config("default", ["reward.components=[{name: env, fn: env_reward}]"])
    with pytest.raises(ConfigError, match=r"reward.components\[0\] \(env\): env_reward is the env's own reward, which env.type=single_turn"):
        check_env_config(cfg)
