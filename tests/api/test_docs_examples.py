"""The examples of docs/extending.md and of the README's "Your own parts" run as written.

Every fenced block whose first line is `# file: NAME` is written to a project directory; each
recipe is validated (imports and shapes, no model) and trained on for two steps of a nano model,
and the Python scripts run with `reinforge.train` given the same small settings. A doc example
that drifts from the code fails here.
"""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest
import torch
import yaml

import reinforge
from reinforge.algos.advantages import ADVANTAGE_ESTIMATORS
from reinforge.algos.types import AdvantageInputs
from reinforge.import_paths import load_object
from reinforge.rollout.trajectory import Trajectory
from reinforge.run.preflight import preflight

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(?:python|yaml)\n# file: (?P<name>[\w.]+)[^\n]*\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL)
TINY = {
    "model.preset": "nano", "task.train_size": 48, "task.eval_size": 8, "rollout.prompts_per_step": 2,
    "rollout.group_size": 2, "trainer.steps": 2, "eval.samples": 1, "sft.steps": 0,
    "telemetry.progress": False, "telemetry.tensorboard": False, "telemetry.wandb": "off",
}


def doc_files(path: Path, section: str | None = None) -> dict[str, str]:
    text = path.read_text()
    if section is not None:  # only the README's section, up to the next one
        text = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    files = {m["name"]: m["body"] for m in BLOCK.finditer(text)}
    assert files, f"no `# file:` blocks in {path}"
    return files


def write_project(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir()
    for name, body in files.items():
        (directory / name).write_text(body)
    return directory


def trajectory(response: str, sampled: int) -> Trajectory:
    return Trajectory("t", 0, [1] * (2 + sampled), [False, False] + [True] * sampled, [0.0] * (2 + sampled), [(2, 2 + sampled)], 2, response, 0, "stop")


@pytest.fixture
def in_project(tmp_path, monkeypatch):
    """Run from the project directory, as a user does; its modules import by name."""

    def enter(files: dict[str, str]) -> Path:
        project = write_project(tmp_path / "project", files)
        monkeypatch.chdir(project)
        monkeypatch.syspath_prepend(str(project))
        return project

    yield enter
    for name, module in list(sys.modules.items()):  # `rewards`, `tasks`...: names other tests may use
        if str(getattr(module, "__file__", "") or "").startswith(str(tmp_path)):
            del sys.modules[name]
    for name, spec in list(ADVANTAGE_ESTIMATORS.items()):  # the example's estimator leaves the registry
        if str(spec.fn.__code__.co_filename).startswith(str(tmp_path)):
            del ADVANTAGE_ESTIMATORS[name]


def small_train(monkeypatch, output_dir: Path):
    """reinforge.train with the example's own arguments, on top of the small settings."""
    real_train = reinforge.train

    def train(config="default", overrides=(), **kwargs):
        merged = {**dict(overrides), **TINY} if not isinstance(overrides, (list, tuple)) else {**TINY}
        return real_train(config, merged, **{**kwargs, "output_dir": output_dir})

    monkeypatch.setattr(reinforge, "train", train)


def test_the_extending_examples_validate_and_train(in_project, tmp_path):
    files = doc_files(ROOT / "docs" / "extending.md")
    assert {"rewards.py", "group_rewards.py", "verifiers.py", "tasks.py", "env.py", "tools.py", "algos.py",
            "recipe.yaml", "env_recipe.yaml", "tool_recipe.yaml", "train_mine.py"} <= set(files)
    project = in_project(files)

    # The parts behave as the docs say, called as the trainer calls them.
    task = reinforge.Task(id="1", prompt="2+2=", answer="4")
    assert load_object("rewards:close_to_answer")(task, trajectory("5", 2), tolerance=1) == 1.0
    assert load_object("rewards:Brevity")(max_tokens=1)(task, trajectory("4", 2)) == 0.0
    group = [trajectory(text, 1) for text in ("4", "4", "5")]
    assert load_object("group_rewards:agrees_with_group")(task, group) == [1.0, 1.0, 0.0]
    assert load_object("verifiers:within_one")(task, " 5 ") == 1.0 and load_object("tools:count_vowels")("reinforge") == 4

    runs = {}
    for recipe, extra in (("recipe.yaml", {}), ("env_recipe.yaml", {"sft.steps": 2}), ("tool_recipe.yaml", {"sft.steps": 2})):
        cfg = reinforge.load_config(project / recipe, {**TINY, **extra, "trainer.output_dir": str(tmp_path / recipe)})
        preflight(cfg)  # every import path resolves and has the right shape, before any model
        runs[recipe] = reinforge.train(cfg)
    steps = runs["recipe.yaml"].steps
    assert {"reward/close/mean", "reward/short/mean", "reward/agree/mean", "reward/correct/mean"} <= set(steps[0])
    assert all(s["reward_errors"] == 0 for r in runs.values() for s in r.steps)
    assert runs["recipe.yaml"].config.algo.advantage.endswith("algos.py:mean_baseline")
    estimator = ADVANTAGE_ESTIMATORS["mean_baseline"].fn
    advantages = estimator(AdvantageInputs(torch.tensor([1.0, 0.0, 2.0, 2.0]), torch.tensor([7, 7, 9, 9]), torch.ones(4, 1, dtype=torch.bool)))
    assert advantages.advantages.tolist() == [0.5, -0.5, 0.0, 0.0]
    env_step = runs["env_recipe.yaml"].steps[0]
    assert env_step["turns"] > 1  # the env's observation was appended and the policy answered again
    assert runs["tool_recipe.yaml"].config.env.tools[1].endswith("tools.py:count_vowels")


def test_the_extending_script_trains_with_its_reward_object(in_project, tmp_path, monkeypatch):
    project = in_project(doc_files(ROOT / "docs" / "extending.md"))
    small_train(monkeypatch, tmp_path / "run")
    runpy.run_path(str(project / "train_mine.py"), run_name="__main__")
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["reward"]["components"] == [{"name": "close", "fn": "rewards:close_to_answer", "weight": 1.0, "params": {"tolerance": 1}}]
    assert saved["reward"]["timeout_s"] == 5.0


def test_the_readme_examples_run(in_project, tmp_path, monkeypatch):
    files = doc_files(ROOT / "README.md", "Your own parts")
    assert set(files) == {"my_rewards.py", "my_recipe.yaml", "train_mine.py"}
    project = in_project(files)
    cfg = reinforge.load_config(project / "my_recipe.yaml", TINY)
    preflight(cfg)
    assert cfg.reward.components[0].fn == f"{project / 'my_rewards.py'}:close_to_answer"
    small_train(monkeypatch, tmp_path / "run")
    runpy.run_path(str(project / "train_mine.py"), run_name="__main__")
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert [c["fn"] for c in saved["reward"]["components"]] == ["my_rewards:close_to_answer"]
