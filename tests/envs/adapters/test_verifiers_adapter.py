"""The verifiers adapter with a SingleTurnEnv and a MultiTurnEnv built with verifiers' own API.

Needs the optional extra: pip install 'reinforge[verifiers]' (verifiers>=0.2,<0.4)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

pytest.importorskip("verifiers", reason="the verifiers extra is not installed: pip install 'reinforge[verifiers]'")

from reinforge.config import ConfigError, load_config  # noqa: E402
from reinforge.envs.adapters.verifiers_env import VerifiersTextEnv, dataset_tasks  # noqa: E402
from reinforge.run.env_factory import build_env, check_env_config  # noqa: E402
from reinforge.tasks.task import Task  # noqa: E402
from exact_tokens import run_and_check_exact_tokens  # noqa: E402

ENVS = Path(__file__).parent / "verifiers_envs.py"
SAY_4 = Task(id="a", prompt="Say 4.", answer="4")


def vf_cfg(*overrides):
    return load_config("default", [f"env.type={ENVS}:load_environment", "rollout.prompt_format=auto", "env.max_turns=3", *overrides])


def test_single_turn_env_prompt_and_rubric_reward(tokenizer) -> None:
    cfg = vf_cfg()
    check_env_config(cfg)
    env = build_env(cfg, tokenizer)
    assert isinstance(env, VerifiersTextEnv)
    episode = env.episode()
    prompt = episode.reset(SAY_4)  # the env's system prompt goes in front, as its dataset formatting does
    assert prompt == env.chat.prompt_ids([{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "Say 4."}])
    assert episode.step("4", "stop").info == {"env_reward": 1.0, "finish_reason": "stop"}
    other = env.episode()
    other.reset(SAY_4)
    result = other.step("5", "stop")
    assert result.done and result.info["env_reward"] == 0.0


def test_multi_turn_env_replies_are_observations_and_the_rubric_scores_the_end(tokenizer) -> None:
    env = build_env(vf_cfg("env.params={kind: multi, max_turns: 5}"), tokenizer)
    episode = env.episode()
    assert episode.reset(SAY_4) == env.chat.prompt_ids([{"role": "user", "content": "Say 4."}])
    low = episode.step("2", "stop")
    assert not low.done and low.observation_ids == env.chat.observation_ids([{"role": "user", "content": "higher"}])
    right = episode.step("4", "stop")  # the env's final response ends the rollout; the rubric scores it
    assert right.done and right.info == {"env_reward": 1.0, "finish_reason": "stop"}
    # reinforge's env.max_turns cuts a rollout the env would go on with, and it is still scored
    capped = env.episode()
    capped.reset(SAY_4)
    capped.step("1", "stop"), capped.step("2", "stop")
    last = capped.step("3", "stop")
    assert last.done and last.info == {"env_reward": 0.0, "finish_reason": "max_turns"}


def test_a_dropped_episode_ends_its_rollout(tokenizer) -> None:
    env = build_env(vf_cfg("env.params={kind: multi, max_turns: 5}"), tokenizer)
    episode = env.episode()
    episode.reset(SAY_4)
    episode.step("1", "stop")
    channel = episode.channel
    del episode
    gc.collect()
    kind, state = channel.requests.get(timeout=10)  # the rollout finished instead of waiting forever
    assert kind == "done" and state["stop_condition"] == "prompt_too_long"


@pytest.mark.parametrize("kind", ["single", "multi"])
def test_verifiers_envs_keep_tokens_exact_with_the_real_engine(tokenizer, sharp_nano_model, kind) -> None:
    env = build_env(vf_cfg(f"env.params={{kind: {kind}, max_turns: 5}}"), tokenizer)
    tasks = [Task(id=f"v{n}", prompt=f"Say {n}.", answer=str(n)) for n in (3, 7)]
    out = run_and_check_exact_tokens(env, tasks, sharp_nano_model, tokenizer)
    assert all("env_reward" in t.stats for t in out)
    assert all(t.num_turns == 1 for t in out) if kind == "single" else any(t.num_turns > 1 for t in out)


@pytest.mark.parametrize(
    "kind, message",
    [("judge", "JudgeRubric, which calls a model API"), ("group", r"group reward functions \(best_of_group\)")],
)
def test_rubrics_that_cannot_run_locally_per_episode_are_refused(kind, message) -> None:
    with pytest.raises(ConfigError, match=message):
        check_env_config(vf_cfg(f"env.params={{kind: {kind}}}"))


def test_the_envs_dataset_as_a_task_source() -> None:
    cfg = load_config("default", ["task.source=reinforge.envs.adapters.verifiers_env:dataset_tasks", "task.train_size=3", "task.eval_size=2",
                                  f"task.params={{environment: '{ENVS}:load_environment'}}"])
    splits = dataset_tasks(cfg.task, 0)
    assert len(splits.train) == 3 and len(splits.eval) == 2
    first = splits.train[0]
    assert first.prompt == [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "Say 1."}]
    assert first.answer == "1" and first.metadata["example_id"] == 0


def test_a_loader_that_returns_no_environment_is_refused(tmp_path) -> None:
    module = tmp_path / "not_vf.py"
    module.write_text("def load_environment(size: int = 1):\n    return {'size': size}\n")
    with pytest.raises(ConfigError, match=r"returned a dict, not a verifiers Environment; a verifiers environment is a load_environment"):
        check_env_config(load_config("default", [f"env.type={module}:load_environment", "rollout.prompt_format=auto"]))
    with pytest.raises(ConfigError, match=r"called as load_environment\(\*\*env.params\).*does not fit"):
        check_env_config(load_config("default", [f"env.type={module}:load_environment", "rollout.prompt_format=auto", "env.params={colour: red}"]))
