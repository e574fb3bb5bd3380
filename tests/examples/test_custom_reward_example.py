"""examples/custom_reward: a task source and a partial-credit reward of the user's own, named by
import path in the recipe ('word_problems:load', './closeness.py:close_to_answer'), run as a user
runs it. Only the plumbing is tested (a short warm-up, two RL steps): the component's scores reach
metrics.jsonl under its name, computed with the recipe's parameter, on the source's own tasks."""

from __future__ import annotations

import re

import yaml

from example_runs import EXAMPLES, import_example_file, read_jsonl, run_example
from reinforge.config import TaskConfig

FAST = [
    "task.train_size=200", "task.eval_size=16", "sft.steps=20", "rollout.prompts_per_step=4", "rollout.group_size=4",
    "trainer.steps=2", "trainer.sample_every=1", "eval.every=2", "eval.samples=1",
]


def close_by_hand(response: str, answer: str, scale: float) -> float:
    found = re.search(r"-?\d+", response)
    return 0.0 if found is None else max(0.0, 1.0 - abs(int(found.group()) - int(answer)) / scale)


def test_custom_reward_and_task_source_train_as_named_in_the_recipe(tmp_path):
    run_dir, _ = run_example("custom_reward", tmp_path, *FAST)

    recipe = yaml.safe_load((EXAMPLES / "custom_reward" / "recipe.yaml").read_text())
    close = next(c for c in recipe["reward"]["components"] if c["name"] == "close")
    scale = close["params"]["scale"]
    assert scale != 10, "the recipe's scale must differ from the function's default, or this test cannot see it passed"

    # The component's metrics are logged under its name on every RL step.
    steps = [r for r in read_jsonl(run_dir / "metrics.jsonl") if r["stage"] == "rl"]
    assert len(steps) == 2
    for step in steps:
        assert 0.0 <= step["reward/close/mean"] <= 1.0 and "reward/close/frac_nonzero" in step
        assert step["reward_errors"] == 0

    # Each sample's score is the function's, with the recipe's scale.
    samples = read_jsonl(run_dir / "samples.jsonl")
    assert samples
    source = import_example_file("custom_reward", "word_problems")
    generated = source.load(TaskConfig(train_size=200, eval_size=16, params=recipe["task"]["params"]), seed=0)
    tasks = {t.id: t for t in generated}
    for sample in samples:
        task = tasks[sample["task_id"]]  # the source's own task, as it generated it
        assert sample["prompt"] == task.prompt
        assert sample["rewards"]["close"] == close_by_hand(sample["response"], task.answer, scale)
    # Trained on: the source's word problems (not the built-in arithmetic default).
    assert all(re.fullmatch(r"\w+ has \d+ \w+ and (gets \d+ more|gives away \d+)\. How many \w+ now\?", s["prompt"]) for s in samples)
