"""Each kind of user part named by import path goes through validation (`preflight`, before any
model) and into the part the run uses; a wrong kind, a wrong signature or a wrong return is a
ConfigError naming the key. Runs in a fresh user project directory (tests/user_code.py).

Whole runs with user parts: tests/distributed/test_ray_user_rewards.py (rewards: function with
params, class, group reward; in worker processes and on Ray), test_ddp_user_parts.py (advantage
estimator and policy loss, one and two learners) and the short run at the end of this file (task
source with a user verifier, an estimator registered with @register_advantage)."""

from __future__ import annotations

import pytest

from reinforge.algos import advantages
from reinforge.algos.advantages import registry as advantage_registry
from reinforge.config import ConfigError, load_config
from reinforge.run.env_factory import build_env
from reinforge.rewards.builtin import build_component
from reinforge.tasks.verifiers import verify
from reinforge.tasks.registry import load_tasks
from reinforge.run import pipeline
from reinforge.run.preflight import preflight
from user_code import user_project  # noqa: F401 - fixture

PARTS = """
    import torch

    from reinforge.algos.advantages import register_advantage
    from reinforge.algos.losses.ppo_clip import ppo_clip
    from reinforge.algos.types import AdvantageOutput
    from reinforge.rewards.user_rewards import group_reward
    from reinforge.tasks.task import Task

    # ---- rewards
    def close_to(task, trajectory, tolerance=1.0):
        return 1.0 if abs(len(trajectory.response_text) - len(task.answer)) <= tolerance else 0.0


    class Contains:
        def __init__(self, needle):
            self.needle = needle

        def __call__(self, task, trajectory):
            return float(self.needle in trajectory.response_text)


    @group_reward
    def rank_in_group(task, trajectories):
        return [i / len(trajectories) for i in range(len(trajectories))]


    def only_task(task):
        return 1.0


    class NeedsNothing:
        def __call__(self, task, trajectory):
            return 1.0


    class BrokenInit:
        def __init__(self):
            raise RuntimeError("no model file")

    # ---- verifier and task sources
    def ends_with_answer(task, response):
        return float(response.strip().endswith(task.answer))


    def tasks(cfg, seed):
        n = cfg.params.get("n", 12)
        return [Task(id=f"t{i}", prompt=f"{i}+1=", answer=str(i + 1), verifier="user_parts:ends_with_answer") for i in range(n)]


    def dict_tasks(cfg, seed):
        return [{"prompt": "1+1=", "answer": "2"}] * 4


    def tasks_with_a_wrong_verifier(cfg, seed):
        return [Task(id=f"t{i}", prompt=f"{i}=", answer=str(i), verifier="user_parts:no_such_verifier") for i in range(4)]


    def tasks_with_a_one_argument_verifier(cfg, seed):
        return [Task(id=f"t{i}", prompt=f"{i}=", answer=str(i), verifier="user_parts:only_task") for i in range(4)]


    def load_without_seed(cfg):
        return []

    # ---- advantage estimators and losses
    def centered(inputs):
        advantages = torch.zeros_like(inputs.rewards, dtype=torch.float32)
        for group in inputs.group_ids.unique():
            members = inputs.group_ids == group
            advantages[members] = (inputs.rewards[members] - inputs.rewards[members].mean()).float()
        return AdvantageOutput(advantages)


    @register_advantage("user_parts_pairs", min_group_size=4)
    def needs_four(inputs):
        return centered(inputs)


    def my_loss(logprobs, old_logprobs, advantages, mask, params):
        return ppo_clip(logprobs, old_logprobs, advantages, mask, params)

    # ---- tools
    def count_vowels(text: str) -> int:
        \"\"\"Count the vowels in a text.

        Args:
            text: the text to look at
        \"\"\"
        return sum(c in "aeiou" for c in text.lower())


    def undocumented(text):
        return text
"""

TASK_MODULE = """
    from reinforge.tasks.task import Task

    def load(cfg, seed):
        return [Task(id=f"m{i}", prompt=f"{i}*2=", answer=str(2 * i)) for i in range(10)]

    def check(cfg):
        if cfg.params.get("n", 10) > 10:
            raise ValueError("this source has 10 tasks; task.params.n must be <= 10")
"""


@pytest.fixture
def project(user_project, monkeypatch):
    """The user's project with its parts."""
    # @register_advantage in a user module registers into the global table: undone after the test.
    monkeypatch.setattr(advantage_registry, "ADVANTAGE_ESTIMATORS", dict(advantage_registry.ADVANTAGE_ESTIMATORS))
    user_project.write("user_parts.py", PARTS)
    user_project.write("user_task_module.py", TASK_MODULE)
    return user_project


def check(*overrides: str):
    cfg = load_config("default", list(overrides))
    preflight(cfg)
    return cfg


def config_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        check(*overrides)
    return str(err.value)


def rewards(*components: str) -> str:
    return f"reward.components=[{', '.join(components)}]"


# ---------------------------------------------------------------------------- rewards

def test_reward_function_with_params_class_and_group_reward(project) -> None:
    cfg = check(rewards(
        "{name: close, fn: 'user_parts:close_to', params: {tolerance: 0}}",
        "{name: has_seven, fn: './user_parts.py:Contains', params: {needle: '7'}}",
        "{name: rank, fn: 'user_parts:rank_in_group'}",
    ))
    built = {c.name: build_component(c.fn, c.params) for c in cfg.reward.components}
    assert [group for _, group in built.values()] == [False, False, True]
    from reinforge.rollout.trajectory import single_turn_trajectory
    from reinforge.tasks.task import Task

    task = Task(id="t", prompt="3+4=", answer="7")
    right, wrong = (single_turn_trajectory("t", [1], [2], [-0.1], text) for text in ("7", "12"))
    assert built["close"][0](task, right) == 1.0 and built["close"][0](task, wrong) == 0.0  # tolerance=0 bound
    assert built["has_seven"][0](task, right) == 1.0 and built["has_seven"][0](task, wrong) == 0.0
    assert built["rank"][0](task, [right, wrong]) == [0.0, 0.5]


@pytest.mark.parametrize(("component", "expected"), [
    ("{name: mine, fn: 'user_parts:only_task'}", "signature (task) does not fit"),
    ("{name: mine, fn: 'user_parts:close_to', params: {scale: 2}}", "unexpected keyword argument 'scale'"),
    ("{name: mine, fn: 'user_parts:NeedsNothing', params: {scale: 2}}", "built with the component's params"),
    ("{name: mine, fn: 'user_parts:BrokenInit'}", "raised RuntimeError: no model file"),
    ("{name: mine, fn: 'user_parts:PARTS_MISSING'}", "has no attribute 'PARTS_MISSING'"),
    ("{name: mine, fn: 'user_parts:centered'}", "signature (inputs) does not fit"),  # an estimator, not a reward
    ("{name: mine, fn: 'user_parts_absent:score'}", "'user_parts_absent:score': cannot import module 'user_parts_absent'"),
])
def test_a_wrong_reward_is_a_config_error_naming_the_component(project, component: str, expected: str) -> None:
    message = config_error(rewards("{name: correct, fn: verifier}", component))
    assert message.startswith("reward.components[1] (mine): ") and expected in message


# ---------------------------------------------------------------------------- tasks and verifiers

def test_task_source_function_returning_tasks_with_a_user_verifier(project) -> None:
    cfg = check("task.source=user_parts:tasks", "task.params={n: 12}", "task.eval_size=4")
    splits = load_tasks(cfg.task, seed=0)
    assert len(splits.eval) == 4 and len(splits.train) == 8
    task = splits.train[0]
    assert verify(task, f"so it is {task.answer}") == 1.0 and verify(task, "no idea") == 0.0


def test_jsonl_tasks_naming_a_user_verifier(project) -> None:
    import json

    lines = [{"prompt": f"{i}+1=", "answer": str(i + 1), "verifier": "user_parts:ends_with_answer"} for i in range(6)]
    project.write("tasks.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    cfg = check("task.source=jsonl", f"task.path={project.dir / 'tasks.jsonl'}", "task.eval_size=2")
    task = load_tasks(cfg.task, seed=0).train[0]
    assert task.verifier == "user_parts:ends_with_answer" and verify(task, f"= {task.answer}") == 1.0
    project.write("bad.jsonl", json.dumps({"prompt": "1=", "answer": "1", "verifier": "user_parts:only_task"}) + "\n")
    with pytest.raises(ConfigError, match=r"bad.jsonl:1: verifier user_parts:only_task: its signature \(task\) does not fit"):
        check("task.source=jsonl", f"task.path={project.dir / 'bad.jsonl'}")


def test_task_source_module_with_load_and_check(project) -> None:
    cfg = check("task.source=user_task_module:load", "task.eval_size=2")  # its load function
    assert len(load_tasks(cfg.task, seed=0).eval) == 2
    by_file = check("task.source=./user_task_module.py:load", "task.eval_size=2")  # the file, by path
    assert len(load_tasks(by_file.task, seed=0).train) == 8
    # The module itself as the source (its load and check), named as an attribute of another module.
    project.write("task_namespace.py", "import user_task_module as source\n")
    whole = check("task.source=task_namespace:source", "task.params={n: 10}", "task.eval_size=2")
    splits = load_tasks(whole.task, seed=0)
    assert sorted(t.id for t in splits.train + splits.eval) == sorted(f"m{i}" for i in range(10))
    message = config_error("task.source=task_namespace:source", "task.params={n: 20}")  # its check, in preflight
    assert message.startswith("task.source task_namespace:source: check failed: ValueError: this source has 10 tasks")


def test_a_wrong_task_source_is_a_config_error_naming_task_source(project, monkeypatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("a model was built before the tasks were checked")

    for name in ("build_policy", "build_tiny_llama", "load_model_and_tokenizer"):
        monkeypatch.setattr(pipeline, name, forbidden)
    message = config_error("task.source=user_parts:load_without_seed")
    assert message.startswith("task.source: user_parts:load_without_seed: load: its signature (cfg) does not fit")
    cfg = check("task.source=user_parts:dict_tasks")  # its return value can only be checked by loading
    with pytest.raises(ConfigError, match=r"task.source user_parts:dict_tasks: load returned a dict .* reinforge.Task"):
        pipeline.run_training(cfg)  # stops before any model (the model factories fail this test)
    cfg = check("task.source=user_parts:tasks_with_a_wrong_verifier", "task.eval_size=2")
    with pytest.raises(ConfigError, match=r"task 't\d'.*verifier='user_parts:no_such_verifier'.*has no attribute 'no_such_verifier'"):
        load_tasks(cfg.task, seed=0)
    project.write("same_prompt.py", (
        "from reinforge import Task\n"
        "def load(cfg, seed):\n"
        "    return [Task(id=f's{i}', prompt='Guess my number.', answer=str(i)) for i in range(6)]\n"
    ))
    cfg = check("task.source=same_prompt:load", "task.eval_size=2")
    with pytest.raises(ConfigError, match=r"every training task's prompt is also among the 2 held-out tasks.*TaskSplits"):
        load_tasks(cfg.task, seed=0)
    cfg = check("task.source=user_parts:tasks_with_a_one_argument_verifier", "task.eval_size=2")
    with pytest.raises(ConfigError, match=r"verifier='user_parts:only_task'\): verifier user_parts:only_task: its signature \(task\) does not fit"):
        load_tasks(cfg.task, seed=0)


# ---------------------------------------------------------------------------- advantage estimators and losses

def test_advantage_estimator_plain_and_registered(project) -> None:
    plain = advantages.get_estimator(check("algo.advantage=user_parts:centered").algo.advantage)
    assert plain.min_group_size == 1 and not plain.needs_critic
    registered = advantages.get_estimator(check("algo.advantage=user_parts:needs_four", "rollout.group_size=4").algo.advantage)
    assert registered.name == "user_parts_pairs" and registered.min_group_size == 4
    message = config_error("algo.advantage=user_parts:needs_four", "rollout.group_size=2")
    assert "rollout.group_size=2" in message and "needs group_size >= 4" in message


def test_policy_loss_by_import_path(project) -> None:
    from reinforge.algos.losses.policy import get_policy_loss

    cfg = check("algo.policy_loss=./user_parts.py:my_loss")
    assert get_policy_loss(cfg.algo.policy_loss).__name__ == "my_loss"


@pytest.mark.parametrize(("overrides", "key", "expected"), [
    (["algo.advantage=user_parts:my_loss"], "algo.advantage: ", "signature (logprobs, old_logprobs, advantages, mask, params) does not fit"),
    (["algo.policy_loss=user_parts:centered"], "algo.policy_loss: ", "signature (inputs) does not fit"),
    (["algo.policy_loss=user_parts:close_to"], "algo.policy_loss: ", "a policy loss is fn(logprobs"),
    (["algo.advantage=user_parts:Contains"], "algo.advantage: ", "is a class; an advantage estimator is fn(inputs"),
    (["algo.policy_loss=user_parts:Contains"], "algo.policy_loss: ", "is a class; a policy loss is fn(logprobs"),
    (["algo.advantage=./missing_algos.py:f"], "algo.advantage: ", "no such file"),
])
def test_the_wrong_kind_of_algorithm_part_is_a_config_error_naming_the_key(project, overrides, key: str, expected: str) -> None:
    message = config_error(*overrides)
    assert message.startswith(key) and expected in message


# ---------------------------------------------------------------------------- tools

def test_tool_by_import_path_in_the_builtin_tool_env(project, tokenizer) -> None:
    cfg = check("env.type=tool", "rollout.prompt_format=chat", "env.tools=[calculator, 'user_parts:count_vowels']", "env.tool_format=hermes")
    env = build_env(cfg, tokenizer)
    assert env.registry.names() == ["calculator", "count_vowels"]
    episode = env.episode()
    from reinforge.tasks.task import Task

    episode.reset(Task(id="v", prompt="How many vowels in banana?", answer="3"))
    step = episode.step('<tool_call>{"name": "count_vowels", "arguments": {"text": "banana"}}</tool_call>', "stop")
    assert step.info["valid_calls"] == 1 and step.observation_text == "3"


@pytest.mark.parametrize(("tool", "expected"), [
    ("'user_parts:undocumented'", "Give every parameter a type hint"),
    ("'user_parts:no_such_tool'", "has no attribute 'no_such_tool'"),
])
def test_a_wrong_tool_is_a_config_error_naming_env_tools(project, tool: str, expected: str) -> None:
    message = config_error("env.type=tool", "rollout.prompt_format=chat", f"env.tools=[calculator, {tool}]")
    assert message.startswith("env.tools") and expected in message


# ---------------------------------------------------------------------------- a short run

def test_a_short_run_with_a_user_task_source_verifier_and_registered_estimator(project, tmp_path) -> None:
    outcome = pipeline.run_training(load_config("default", [
        "task.source=user_parts:tasks", "task.params={n: 24}", "task.eval_size=4", "algo.advantage=user_parts:needs_four",
        "model.preset=nano", "sft.steps=0", "trainer.steps=1", "rollout.prompts_per_step=2", "rollout.group_size=4",
        "rollout.max_new_tokens=6", "eval.samples=1", "eval.every=100", "trainer.checkpoint_every=0",
        "telemetry.progress=false", "telemetry.tensorboard=false", "telemetry.wandb='off'",
        rewards("{name: correct, fn: verifier}", "{name: close, fn: 'user_parts:close_to', params: {tolerance: 3}}"),
        f"trainer.output_dir={tmp_path / 'run'}",
    ]))
    step = outcome.rl.steps[0]
    assert step["reward_errors"] == 0.0 and "reward/close/mean" in step and "reward/correct/mean" in step
    assert len(outcome.rl.rewards) == 1
    # Evaluation ran the user's verifier in the verifier worker processes, without an error.
    assert outcome.rl.evals and all(e["verify_errors"] == 0.0 for e in outcome.rl.evals)
