"""The SkyRL BaseTextEnv adapter and the TRL environment_factory adapter, with real envs of each shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.envs.adapters.skyrl_env import SkyRLTextEnv
from reinforge.envs.adapters.trl_env import TRLToolEnv
from reinforge.run.env_factory import build_env, check_env_config
from reinforge.tasks.task import Task
from exact_tokens import imitate, run_and_check_exact_tokens
from reinforge.models.tiny_llama import build_tiny_llama

ENVS = Path(__file__).parent / "foreign_envs.py"


def cfg_for(name, *overrides):
    return load_config("default", [f"env.type={ENVS}:{name}", "env.max_turns=3", "rollout.prompt_format=auto", *overrides])


def test_skyrl_env_gets_extras_and_its_replies_become_observations(tokenizer) -> None:
    cfg = cfg_for("SkyRLCountdown", "env.params={max_turns: 2}")
    check_env_config(cfg)
    env = build_env(cfg, tokenizer)
    assert isinstance(env, SkyRLTextEnv)
    task = Task(id="c", prompt="Say 42.", answer="42")
    episode = env.episode()
    prompt = episode.reset(task)
    assert prompt == env.chat.prompt_ids([{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "Say 42."}])
    wrong = episode.step("41", "stop")
    assert not wrong.done and wrong.info == {"env_reward": 0.0}
    assert wrong.observation_ids == env.chat.observation_ids([{"role": "user", "content": "again"}])
    right = episode.step("42", "stop")
    assert right.done and right.info == {"env_reward": 1.0, "finish_reason": "stop"}
    # env_config reads as attributes too (SkyRL's DictConfig), and extras carry the answer
    assert episode.foreign.target == "42" and episode.foreign.max_turns == 2


def test_skyrl_env_keeps_tokens_exact_with_the_real_engine(tokenizer, sharp_nano_model) -> None:
    env = build_env(cfg_for("SkyRLCountdown", "env.params={max_turns: 3}"), tokenizer)
    tasks = [Task(id=f"k{i}", prompt=f"Say {i}.", answer=str(i)) for i in range(2)]
    out = run_and_check_exact_tokens(env, tasks, sharp_nano_model, tokenizer)
    assert any(t.num_turns > 1 for t in out) and all("env_reward" in t.stats for t in out)


def test_trl_env_tools_are_bound_per_episode_and_get_reward_scores_it(tokenizer) -> None:
    cfg = cfg_for("TRLCounter")
    check_env_config(cfg)
    env = build_env(cfg, tokenizer)
    assert isinstance(env, TRLToolEnv) and env.registry.names() == ["increment"]
    task = Task(id="i", prompt="unused", answer="", metadata={"target": 5})
    first, second = env.episode(), env.episode()
    prompt = first.reset(task)
    second.reset(task)
    assert prompt == env.chat.prompt_ids([{"role": "user", "content": "Increment the counter to 5."}])
    call = first.step("<<increment: 3>>", "stop")
    assert not call.done and call.observation_text == "3" and call.info["valid_calls"] == 1
    assert call.observation_ids == env.chat.observation_ids([{"role": "tool", "content": "3"}])
    assert second.foreign.counter == 0  # each episode has its own instance
    assert first.step("<<increment: 2>>", "stop").observation_text == "5"
    answer = first.step("done", "stop")
    assert answer.done and answer.info["env_reward"] == 1.0
    # at env.max_turns the episode's reward is taken even without an answer
    second.step("<<increment: 1>>", "stop"), second.step("<<increment: 1>>", "stop")
    assert second.step("<<increment: 1>>", "stop").info["env_reward"] == 0.0


def test_trl_async_methods_and_self_sampled_tasks_share_a_group(tokenizer) -> None:
    env = build_env(cfg_for("TRLAsyncCounter"), tokenizer)
    task = Task(id="self", prompt="", answer="")  # no target: reset samples one from the global RNG
    a, b = env.episode(), env.episode()
    assert a.reset(task) == b.reset(task) and a.foreign.target == b.foreign.target
    assert a.step(f"<<increment: {a.foreign.target}>>", "stop").observation_text == str(a.foreign.target)
    assert a.step("ok", "stop").info["env_reward"] == 1.0


def counter_demo(target: int) -> list[dict]:
    call = {"type": "function", "function": {"name": "increment", "arguments": {"step": target}}}
    return [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": str(target)}, {"role": "assistant", "content": "done"}]


def test_trl_env_keeps_tokens_exact_with_the_real_engine(tokenizer) -> None:
    env = build_env(cfg_for("TRLCounter"), tokenizer)
    tasks = [Task(id=f"n{i}", prompt="", answer="", metadata={"target": i + 1}, demonstration=counter_demo(i + 1)) for i in range(3)]
    # a random model never writes a tool call: a few imitation steps on the demonstrations (laid out
    # by the adapter's sft_example) make it call the env's tool, so episodes have tool replies
    model = imitate(build_tiny_llama(tokenizer, "nano", seed=0), env, tasks)
    out = run_and_check_exact_tokens(env, tasks, model, tokenizer, group_size=3, max_new_tokens=24)
    assert sum(t.stats.get("valid_calls", 0) for t in out) > 0 and any(t.num_turns > 1 for t in out)
    assert all("env_reward" in t.stats for t in out)


def test_bad_trl_and_skyrl_shapes_name_what_is_missing(tmp_path) -> None:
    module = tmp_path / "bad_envs.py"
    module.write_text(
        "class Undocumented:\n"
        "    def reset(self, **kwargs):\n        return 'hi'\n"
        "    def poke(self, x):\n        return x\n"
        "class InitOnly:\n"
        "    def init(self, prompt):\n        return prompt, {}\n"
    )
    with pytest.raises(ConfigError, match=r"tool method .*Undocumented.poke: cannot make a tool"):
        check_env_config(load_config("default", [f"env.type={module}:Undocumented", "rollout.prompt_format=auto"]))
    with pytest.raises(ConfigError) as err:
        check_env_config(load_config("default", [f"env.type={module}:InitOnly"]))
    assert "as a SkyRL text env it has no step()" in str(err.value) and "as a TRL environment it has no reset()" in str(err.value)
