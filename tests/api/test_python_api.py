"""reinforge from Python: load_config overrides, train() with reward functions / tasks as objects,
evaluate(), and a cheap `import reinforge`.

The runs are wiring checks at the smallest settings (2 RL steps of a nano model, no warm-up); the
learning itself is tested in test_end_to_end_learning.py. Where a reward ran is read from the
score: `where_it_ran` returns 1.0 in a reward worker process and 0.0 in the trainer's own process
(reinforge.train marks its process in REINFORGE_TRAINING_PID, which workers inherit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import reinforge
from reinforge import import_paths
from reinforge.api.workers import TRAINING_PID_VAR
from reinforge.cli import main as cli_main

TINY = {
    "model.preset": "nano", "task.train_size": 64, "task.eval_size": 8, "rollout.prompts_per_step": 2,
    "rollout.group_size": 2, "trainer.steps": 2, "eval.samples": 1, "sft.steps": 0, "reward.cache": False,
    "telemetry.progress": False, "telemetry.tensorboard": False, "telemetry.wandb": "off",
}


def where_it_ran(task, trajectory):
    """1.0 in a reward worker process, 0.0 in the trainer's process."""
    return float(os.getpid() != int(os.environ.get(TRAINING_PID_VAR, "-1")))


# A lambda bound to a module-level name is importable by that name, like a def.
named_lambda = lambda task, trajectory: 0.25  # noqa: E731


class Scaled:
    """A reward class: built with its params, or handed over as an instance (then pickled to workers)."""

    def __init__(self, factor: float):
        self.factor = factor

    def __call__(self, task, trajectory):
        return self.factor * where_it_ran(task, trajectory)


def reward_means(result, name):
    return [step[f"reward/{name}/mean"] for step in result.steps]


def saved_components(run_dir: Path) -> dict[str, str]:
    tree = yaml.safe_load((run_dir / "config.yaml").read_text())
    return {c["name"]: c["fn"] for c in tree["reward"]["components"]}


# --------------------------------------------------------------------------- import and config


def test_import_reinforge_loads_neither_torch_nor_transformers():
    code = (
        "import sys, reinforge\n"
        "cfg = reinforge.load_config('default', {'trainer.steps': 3})\n"
        "task = reinforge.Task(id='1', prompt='1+1=', answer='2')\n"
        "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "print(cfg.trainer.steps, task.answer, heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["3", "2", "[]"]


def test_every_exported_name_resolves():
    assert sorted(reinforge.__all__) == sorted(reinforge._EXPORTS)
    for name in reinforge.__all__:
        assert getattr(reinforge, name) is not None, name
    assert {"train", "evaluate", "load_config", "Task", "Env", "group_reward", "register_advantage"} <= set(reinforge.__all__)
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        reinforge.trian  # noqa: B018


def test_load_config_takes_strings_dicts_and_keyword_sections():
    cfg = reinforge.load_config(
        "default", {"algo.lr": 1e-5, "rollout": {"group_size": 4}}, trainer={"steps": 7, "output_dir": Path("/tmp/x")}
    )
    assert (cfg.algo.lr, cfg.rollout.group_size, cfg.trainer.steps, cfg.trainer.output_dir) == (1e-5, 4, 7, "/tmp/x")
    assert cfg.rollout.prompts_per_step == reinforge.load_config().rollout.prompts_per_step  # the rest of the section stays
    assert reinforge.load_config("default", ["trainer.steps=9"]).trainer.steps == 9
    # A method preset from Python behaves as on the command line: its keys, then explicit ones.
    dapo = reinforge.load_config("default", {"algo.method": "dapo"})
    assert dapo.algo.dynamic_sampling and dapo.algo.clip_eps_high == 0.28


def test_load_config_names_a_python_function_by_its_import_path():
    cfg = reinforge.load_config(reward={"components": [{"name": "w", "fn": where_it_ran}]})
    assert cfg.reward.components[0].fn == f"{__name__}:where_it_ran"


@pytest.mark.parametrize(
    ("overrides", "sections", "message"),
    [
        ({"algo.lrr": 1.0}, {}, "algo.lrr: no such config key"),
        ({"trainer.steps": object()}, {}, "trainer.steps: a object is not a config value"),
        ({"algo.lr": float("nan")}, {}, "algo.lr: nan is not a valid config value"),
        ("algo.lr=1", {}, "a list of 'key=value' strings or a dict"),
        ((), {"trainer": 5}, r"trainer=\.\.\. must be a dict"),
    ],
)
def test_load_config_errors_name_the_key(overrides, sections, message):
    with pytest.raises(reinforge.ConfigError, match=message):
        reinforge.load_config("default", overrides, **sections)


# --------------------------------------------------------------------------- train


def test_train_with_python_rewards_under_process_isolation(tmp_path):
    result = reinforge.train(
        "default", TINY, output_dir=tmp_path / "run",
        reward_fns=[where_it_ran, ("lam", named_lambda), ("inst", Scaled(2.0)), ("cls", Scaled, 0.5, {"factor": 3.0})],
    )
    # Each ran in a reward worker process (the default isolation): by import path, or pickled.
    assert reward_means(result, "where_it_ran") == [1.0, 1.0]
    assert reward_means(result, "lam") == [0.25, 0.25]
    assert reward_means(result, "inst") == [2.0, 2.0]
    assert reward_means(result, "cls") == [3.0, 3.0]
    assert result.rewards == [1.0 + 0.25 + 2.0 + 0.5 * 3.0] * 2  # the weights apply as for a recipe's components
    # The saved config names what was used: import paths, and a label for the instance.
    assert saved_components(result.run_dir) == {
        "where_it_ran": f"{__name__}:where_it_ran",
        "lam": f"{__name__}:named_lambda",
        "inst": f"<python object {__name__}:Scaled>",
        "cls": f"{__name__}:Scaled",
    }
    # The result: the run directory, every step's metrics, held-out accuracy before and after.
    assert result.run_dir == tmp_path / "run" and (result.final_model / "config.json").is_file()
    assert [s["policy_version"] for s in result.steps] == [1.0, 2.0]
    assert [e["step"] for e in result.evals] == [0, 2]
    assert (result.accuracy_before, result.accuracy_after) == (result.evals[0]["accuracy"], result.evals[-1]["accuracy"])
    assert result.config.trainer.steps == 2 and TRAINING_PID_VAR not in os.environ


TASKS = [reinforge.Task(id=str(i), prompt=f"{i}+1=", answer=str(i + 1), verifier="numeric") for i in range(20)]


@pytest.fixture(scope="module")
def inline_score():
    """A lambda defined inside a function: it has no import path."""
    return lambda task, trajectory: where_it_ran(task, trajectory) + 0.5


@pytest.fixture(scope="module")
def tasks_run(tmp_path_factory, inline_score):
    """A run on tasks handed over as a list, with the inline lambda as its reward, in threads."""
    run = tmp_path_factory.mktemp("tasks") / "run"
    return reinforge.train(
        "default", TINY, output_dir=run, tasks=TASKS, reward_fns=[("inline", inline_score)], reward={"isolation": "thread"}
    )


def test_train_with_a_task_list_and_an_inline_lambda_in_threads(tasks_run):
    assert reward_means(tasks_run, "inline") == [0.5, 0.5]  # 0.5 + 0.0: in the trainer's own process
    assert tasks_run.evals[0]["eval_tasks"] == 8.0  # task.eval_size of the 20 held out, as for a JSONL file
    saved = yaml.safe_load((tasks_run.run_dir / "config.yaml").read_text())
    assert saved["task"]["source"].startswith("<python tasks: 20 tasks, sha1 ")
    assert saved_components(tasks_run.run_dir) == {"inline": f"<python object {__name__}:inline_score.<locals>.<lambda>>"}


def test_a_run_on_python_objects_resumes_from_python_only(tasks_run, inline_score, monkeypatch, capsys):
    run = tasks_run.run_dir
    # The command line, in a process where they were never bound, cannot re-create objects that
    # lived in this one, and says so.
    with monkeypatch.context() as patch:
        patch.setattr(import_paths, "_bound", {})
        assert cli_main(["train", "--resume", str(run), "trainer.steps=3"]) == 2
    err = capsys.readouterr().err
    assert "config error: task.source: <python tasks: 20 tasks" in err and "exists only there" in err
    # Other tasks are another config: resuming with them is refused like any config change.
    with pytest.raises(reinforge.ConfigError, match="task.source"):
        reinforge.train(resume=run, tasks=TASKS[:-1], reward_fns=[("inline", inline_score)])
    # Python can, given the same objects again.
    resumed = reinforge.train(resume=run, overrides={"trainer.steps": 3}, tasks=list(TASKS), reward_fns=[("inline", inline_score)])
    assert [s["policy_version"] for s in resumed.steps] == [1.0, 2.0, 3.0]  # the whole run's steps
    assert reward_means(resumed, "inline") == [0.5, 0.5, 0.5]


def test_an_inline_lambda_cannot_go_to_reward_worker_processes(tmp_path):
    with pytest.raises(reinforge.ConfigError, match=r"reward.components\[0\] \(inline\).*reward.isolation=thread"):
        reinforge.train("default", TINY, output_dir=tmp_path / "run", reward_fns=[("inline", lambda task, trajectory: 1.0)])
    assert not (tmp_path / "run").exists()  # refused before the run started


def test_an_object_without_import_path_cannot_go_to_ray_reward_workers(tmp_path):
    with pytest.raises(reinforge.ConfigError, match="Ray reward workers"):
        reinforge.train("default", {**TINY, "workers.reward_workers": 2}, output_dir=tmp_path / "run", reward_fns=[Scaled(1.0)])


def test_a_loss_without_import_path_cannot_go_to_data_parallel_learners(tmp_path):
    inline_loss = lambda logprobs, old_logprobs, advantages, mask, params: counting_reinforce(logprobs, old_logprobs, advantages, mask, params)  # noqa: E731
    with pytest.raises(reinforge.ConfigError, match=r"algo.policy_loss: <python object .*workers.learners=2"):
        reinforge.train("default", {**TINY, "workers.learners": 2}, output_dir=tmp_path / "run", policy_loss=inline_loss)


def test_reward_fns_entries_are_checked():
    with pytest.raises(reinforge.ConfigError, match=r"reward_fns\[0\]: fn is a int"):
        reinforge.train(reward_fns=[("x", 3)])
    with pytest.raises(reinforge.ConfigError, match="non-empty list"):
        reinforge.train(reward_fns=where_it_ran)
    with pytest.raises(reinforge.ConfigError, match="reward component names must be unique"):
        reinforge.train(reward_fns=[where_it_ran, where_it_ran])


SCRIPT = """
import sys
import reinforge

TINY = {tiny!r}

def length_score(task, trajectory):
    return float(len(trajectory.response_text))

bonus = lambda task, trajectory: 0.5  # a lambda with a module-level name: importable by it

{call}
"""
CALL = "result = reinforge.train('default', TINY, reward_fns=[length_score], output_dir=sys.argv[1])"


def test_a_function_of_the_script_being_run_reaches_reward_workers_by_the_scripts_path(tmp_path):
    script = tmp_path / "train_mine.py"
    call = "result = reinforge.train('default', TINY, reward_fns=[length_score, ('bonus', bonus)], output_dir=sys.argv[1])"
    script.write_text(SCRIPT.format(tiny=TINY, call=f"if __name__ == '__main__':\n    {call}\n    print('bonus', result.steps[0]['reward/bonus/mean'])"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert saved_components(tmp_path / "run") == {
        "length_score": f"{tmp_path / 'train_mine.py'}:length_score", "bonus": f"{tmp_path / 'train_mine.py'}:bonus"
    }
    assert "bonus 0.5" in done.stdout  # scored in the reward workers, which imported the script


def test_an_unguarded_script_fails_with_the_fix_instead_of_training_in_its_workers(tmp_path):
    # What a script with an unguarded reinforge.train() call looks like to a reward worker: the
    # trainer holds the function (bound under the script's path, as config_name binds it), and a
    # worker that imports the script reaches the training call at its top level.
    script = tmp_path / "train_mine.py"
    script.write_text(SCRIPT.format(tiny=TINY, call=CALL))
    path = f"{script}:length_score"
    import_paths.bind_object(path, where_it_ran)
    try:
        with pytest.raises(reinforge.ConfigError, match="Put the training call under `if __name__ == '__main__':`"):
            reinforge.train("default", TINY, output_dir=tmp_path / "run", reward_fns=[("length_score", path)])
    finally:
        import_paths.unbind_object(path)
    assert TRAINING_PID_VAR not in os.environ


# --------------------------------------------------------------------------- evaluate


def test_evaluate_a_run_directory(tasks_run, tmp_path):
    result = reinforge.evaluate(tasks_run.run_dir, tasks=TASKS, samples=2, output_dir=tmp_path / "eval")
    report = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert result.report == report and result.accuracy == report["metrics"]["accuracy"]
    assert result.metrics["eval_tasks"] == 8.0 and "mean@2" in result.metrics
    assert report["model"] == str(tasks_run.run_dir / "final")


# --------------------------------------------------------------------------- env, algorithms, verifiers as objects


class AnswerTwiceEnv:
    """Two policy turns per task, with a fixed observation in between (the smallest multi-turn env)."""

    def __init__(self, tokenizer, prompt_suffix: str = ""):
        self.tokenizer, self.max_turns = tokenizer, 2
        self.stop_token_ids = (tokenizer.eos_token_id,)
        self.prompt_suffix = prompt_suffix

    def prompt_ids(self, task):
        return self.tokenizer(task.prompt + self.prompt_suffix).input_ids

    def decode_response(self, token_ids):
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def sft_example(self, task):
        prompt, answer = self.prompt_ids(task), self.tokenizer(task.answer, add_special_tokens=False).input_ids
        return prompt + answer, [False] * len(prompt) + [True] * len(answer)

    def demonstration_turns(self, task):
        return [task.answer]

    def episode(self):
        env = self

        class Episode:
            turns = 0

            def reset(self, task):
                return env.prompt_ids(task)

            def step(self, turn_text, finish_reason):
                self.turns += 1
                done = self.turns == 2
                return reinforge.StepResult(observation_ids=[] if done else env.tokenizer("?", add_special_tokens=False).input_ids, done=done)

        return Episode()


calls = {"advantage": 0, "loss": 0}


def zero_advantages(inputs):
    calls["advantage"] += 1
    return reinforge.AdvantageOutput(inputs.rewards * 0.0)


def counting_reinforce(logprobs, old_logprobs, advantages, mask, params):
    calls["loss"] += 1
    return -advantages[:, None].to(logprobs.dtype) * logprobs * mask, {}


def test_train_with_an_env_class_an_estimator_and_a_loss_as_objects(tmp_path):
    result = reinforge.train(
        "default", TINY, output_dir=tmp_path / "run", env=AnswerTwiceEnv, env_params={"prompt_suffix": " "},
        advantage=zero_advantages, policy_loss=counting_reinforce, reward={"isolation": "thread"},
    )
    assert [s["turns"] for s in result.steps] == [2.0, 2.0]
    assert calls["advantage"] >= 2 and calls["loss"] >= 2 and result.steps[0]["grad_norm"] == 0.0  # zero advantages
    cfg = result.config
    assert (cfg.env.type, cfg.env.params) == (f"{__name__}:AnswerTwiceEnv", {"prompt_suffix": " "})
    assert (cfg.algo.advantage, cfg.algo.policy_loss) == (f"{__name__}:zero_advantages", f"{__name__}:counting_reinforce")


def test_an_env_instance_is_refused_with_the_fix():
    with pytest.raises(reinforge.ConfigError, match="pass the class AnswerTwiceEnv, not an instance"):
        reinforge.train(env=object.__new__(AnswerTwiceEnv))


def off_by_one(task, response: str) -> float:
    return float(response.strip() == str(int(task.answer) + 1))


def test_a_task_verifier_given_as_a_function_is_named_by_its_path():
    from reinforge.api.parts import task_source_name

    label = task_source_name([reinforge.Task(id="1", prompt="1+1=", answer="2", verifier=off_by_one)])
    (task,) = import_paths.load_object(label).load(None, 0)
    assert task.verifier == f"{__name__}:off_by_one"
    with pytest.raises(reinforge.ConfigError, match="verifier <python object .* has no import path"):
        task_source_name([reinforge.Task(id="1", prompt="1+1=", answer="2", verifier=lambda task, response: 1.0)])


def test_a_python_reward_runs_in_ray_reward_workers(tmp_path):
    pytest.importorskip("ray")
    from reinforge.distributed.ray_cluster import stop_ray

    try:
        result = reinforge.train(
            "default", {**TINY, "workers.reward_workers": 1, "workers.cpus_per_worker": 0.5}, output_dir=tmp_path / "run",
            reward_fns=[where_it_ran, ("cls", Scaled, 1.0, {"factor": 3.0})],
        )
    finally:
        stop_ray()
    # 1.0: not the trainer's process (a Ray actor imported this test module by its path).
    assert reward_means(result, "where_it_ran") == [1.0, 1.0] and reward_means(result, "cls") == [3.0, 3.0]


def test_objects_are_named_by_the_path_a_worker_can_import(tmp_path):
    from reinforge.api.objects import config_name

    (tmp_path / "scores.py").write_text("def score(task, trajectory):\n    return 1.0\n\nalias = score\n")
    loaded = import_paths.load_object(f"{tmp_path / 'scores.py'}:alias")
    assert config_name(loaded) == f"{tmp_path / 'scores.py'}:score"  # the file, not its internal module name
    assert config_name(Scaled) == f"{__name__}:Scaled" and config_name(named_lambda) == f"{__name__}:named_lambda"
    instance, other = Scaled(1.0), Scaled(1.0)
    label = config_name(instance)
    assert label.startswith(f"<python object {__name__}:Scaled") and config_name(instance) == label
    assert config_name(other) != label  # another object, another label (`... #2>`)
    assert import_paths.load_object(label) is instance and import_paths.load_object(config_name(other)) is other


def test_a_config_object_takes_overrides_like_a_recipe():
    from reinforge.api.config import config_with

    cfg = config_with(reinforge.load_config(), {"algo.method": "dapo", "trainer.steps": 3}, rollout={"group_size": 4})
    assert (cfg.algo.dynamic_sampling, cfg.trainer.steps, cfg.rollout.group_size) == (True, 3, 4)
    assert cfg.rollout.prompts_per_step == reinforge.load_config().rollout.prompts_per_step


def count_digits(text: str) -> int:
    """Count the digits in a text.

    Args:
        text: the text to look at
    """
    return sum(ch.isdigit() for ch in text)


def test_tools_given_as_functions_build_the_tool_env():
    from reinforge.api.parts import part_values
    from reinforge.run.env_factory import tool_registry
    from reinforge.run.preflight import preflight

    values = part_values(None, None, None, None, ["calculator", count_digits], None, None)
    assert values == {"env.tools": ["calculator", f"{__name__}:count_digits"]}
    cfg = reinforge.load_config("tool-agent", values)
    preflight(cfg)
    assert tool_registry(cfg).names() == ["calculator", "count_digits"]


def test_a_module_with_load_is_a_task_source(tmp_path):
    import types

    from reinforge.api.parts import task_source_name
    from reinforge.tasks.registry import load_tasks

    source = types.ModuleType("my_source")
    source.load = lambda cfg, seed: [reinforge.Task(id=str(i), prompt=f"{i}=", answer=str(i)) for i in range(10)]
    cfg = reinforge.load_config(task={"source": task_source_name(source), "eval_size": 2})
    assert cfg.task.source == "<python module: my_source>"
    splits = load_tasks(cfg.task, seed=0)
    assert (len(splits.train), len(splits.eval)) == (8, 2)
