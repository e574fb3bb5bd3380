"""A task source for envs that make their own problems (`task.source:
reinforge.envs.adapters:seed_tasks`): numbered tasks that only carry a seed.

`task.train_size` training tasks with seeds 0..n-1 and `task.eval_size` held-out tasks with the
seeds after them (disjoint: evaluation never replays a training problem). Each task's id is
`seed-<n>` and `metadata["seed"]` is n, which the adapters hand to the env's reset
(adapters.seeds). `task.params.prompt` (optional) is each task's prompt text: the env's own first
observation replaces it, but the tiny model's tokenizer is trained on it, so a sentence like the
env's intro gives it the right vocabulary. There is no reference answer: the env's reward
(`reward.components: [{name: env, fn: env_reward}]`) is what training and the reward metrics
use, and evaluation's verifier accuracy is not meaningful for such tasks.
"""

from __future__ import annotations

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks.task import Task, TaskSplits


def _prompt(cfg: TaskConfig) -> str:
    extra = sorted(set(cfg.params) - {"prompt"})
    if extra:
        raise ConfigError(f"task.params: seed_tasks takes only 'prompt', got {', '.join(extra)}")
    prompt = cfg.params.get("prompt", "")
    if not isinstance(prompt, str):
        raise ConfigError(f"task.params.prompt must be a string, got {type(prompt).__name__}")
    return prompt


def check(cfg: TaskConfig) -> None:
    _prompt(cfg)


def load(cfg: TaskConfig, seed: int) -> TaskSplits:
    prompt = _prompt(cfg)

    def task(n: int) -> Task:
        return Task(id=f"seed-{n}", prompt=prompt, answer="", metadata={"seed": n})

    train = [task(n) for n in range(cfg.train_size)]
    held_out = [task(cfg.train_size + n) for n in range(cfg.eval_size)]
    return TaskSplits(train=train, eval=held_out)
