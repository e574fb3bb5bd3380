"""`reinforge.train`: the `reinforge train` pipeline from Python, with your own parts as objects.

    result = reinforge.train("default", {"trainer.steps": 50}, reward_fns=[close_to_answer])
    result.accuracy_after, result.run_dir

Every object argument becomes the string the config holds for it (api.objects.config_name: its
import path when its module exposes it, else a `<python ...>` label bound in this process), so the
run takes exactly the code path of a recipe that names the same parts, and the run directory's
config.yaml says what was used (api.parts). `api.workers.check_in_memory_parts` refuses, before
any compute, a labelled object that would have to cross to a place that cannot receive it (a Ray
worker, a data-parallel learner, a reward worker process that cannot unpickle it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reinforge.api.config import Overrides, config_with, load_config, override_items
from reinforge.api.objects import config_name
from reinforge.api.parts import part_values
from reinforge.api.workers import check_in_memory_parts, refuse_nested_run, training_guard
from reinforge.config import Config, ConfigError


@dataclass(frozen=True)
class TrainResult:
    """What a run produced. `steps` are the RL steps' metrics (as in RUN/metrics.jsonl), `evals`
    the held-out evaluations ({"step", "accuracy", "mean@k", ...}; the first before RL, the last
    after), `rewards` the mean reward of each RL step."""

    run_dir: Path
    config: Config
    accuracy_before: float
    accuracy_after: float
    rewards: list[float]
    steps: list[dict]
    evals: list[dict]
    seconds: dict[str, float]
    stop_reason: str | None = None  # set when a training-health monitor ended the run early (monitor.action=stop)

    @property
    def final_model(self) -> Path:
        """The trained policy, a Hugging Face model directory (reinforge.evaluate takes it)."""
        return self.run_dir / "final"


def train(
    config: Config | str | os.PathLike = "default",
    overrides: Overrides = (),
    *,
    reward_fns: Sequence[Any] | None = None,
    env: Any = None,
    env_params: Mapping[str, Any] | None = None,
    agent: Any = None,
    tasks: Any = None,
    tools: Sequence[Any] | None = None,
    advantage: Any = None,
    policy_loss: Any = None,
    model: str | os.PathLike | None = None,
    output_dir: str | os.PathLike | None = None,
    resume: str | os.PathLike | None = None,
    checkpoint: str | os.PathLike | None = None,
    force: bool = False,
    **sections: Any,
) -> TrainResult:
    """Run `reinforge train`: supervised warm-up (if the config has one), RL, held-out evaluation.

    config      a Config (reinforge.load_config), or a shipped recipe's name or a YAML path
    overrides   'key=value' strings or a dict ({"algo.lr": 1e-5}); keyword sections too
                (trainer={"steps": 20})
    reward_fns  replaces reward.components: each entry a function / class / instance (the contract
                of reward.components[].fn), a (name, fn), (name, fn, weight) or
                (name, fn, weight, params) tuple, or a dict like a config component
    env         env.type: an Env class (built as cls(tokenizer, **env_params)) or an
                adapter-shaped env; `env_params` become env.params
    agent       env.agent with env.type=gateway: an agent program, `async def agent(task, client,
                **env_params) -> result` using the openai client (docs/gateway.md); it runs in a
                separate process, so it must be importable or picklable
    tasks       task.source: a list of Task (held out as a JSONL file is), a TaskSplits, or a
                source function load(cfg, seed) / an object with load() and check()
    tools       env.tools: built-in tool names, Tools or typed, docstringed functions (env.type=tool)
    advantage, policy_loss   algo.advantage / algo.policy_loss as functions
    model       a Hugging Face model directory, Hub id, .gguf file or `reinforge model fetch` name
                (reinforge.models.model_source; skips the warm-up unless sft.steps is set; with a
                recipe, the pretrained-model defaults of `reinforge train --model` apply: see
                reinforge.config.pretrained_defaults)
    output_dir  the run directory (default runs/<timestamp>)
    resume      continue the run in this directory from its newest checkpoint (or `checkpoint`);
                pass the same Python objects again; `force` accepts changes that break exactness

    Raises ConfigError (naming the key) before any model is loaded when the config cannot run, and
    reinforge.runtime.run_errors.RunInterrupted when SIGINT / SIGTERM stopped the run after a
    checkpoint (continue it with resume=RUN_DIR).
    """
    refuse_nested_run()
    values = part_values(reward_fns, env, env_params, tasks, tools, advantage, policy_loss)
    if agent is not None:
        if env is not None:
            raise ConfigError("pass env= (an Env) or agent= (an agent program for env.type=gateway), not both")
        values.update({"env.type": "gateway", "env.agent": config_name(agent)})
    items = [*override_items(overrides, sections), *override_items(values)]
    if model is not None:
        if resume is None and not isinstance(config, Config):  # as `reinforge train --model`: a Config is the caller's own
            from reinforge.config.pretrained_defaults import pretrained_defaults

            defaults, said = pretrained_defaults(os.fspath(config), items, os.fspath(model))
            items = [*defaults, *items]
            if said is not None:
                print(said.replace("--model", "train(model=...)", 1), flush=True)
        items.append(f"model.path={os.fspath(model)}")
        if not any(i.startswith("sft.steps=") for i in items):
            items.append("sft.steps=0")
    if output_dir is not None:
        items.append(f"trainer.output_dir={os.fspath(output_dir)}")
    if resume is not None:
        if model is not None or output_dir is not None or isinstance(config, Config) or str(config) != "default":
            raise ConfigError("resume= continues a run as it was configured (its config.yaml); config, model and output_dir do not apply")
        from reinforge.config_resume import resume_config

        cfg = resume_config(os.fspath(resume), items, force, None if checkpoint is None else os.fspath(checkpoint))
    elif isinstance(config, Config):
        cfg = config_with(config, items)
    else:
        cfg = load_config(config, items)
    check_in_memory_parts(cfg)

    from transformers.utils import logging as hf_logging

    from reinforge.run.pipeline import run_training

    hf_logging.disable_progress_bar()  # the run's own display covers progress
    with training_guard():
        outcome = run_training(cfg, resume=resume is not None, checkpoint=None if checkpoint is None else Path(checkpoint))
    rl = outcome.rl
    return TrainResult(
        outcome.run_dir, cfg, outcome.accuracy_before, outcome.accuracy_after, rl.rewards, rl.steps, rl.evals, rl.seconds,
        rl.stop_reason,
    )
