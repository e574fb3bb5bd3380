"""The train recipe for several distinct trainable policies in one run (games: `task.params.policies`).

    task:
      source: game
      params:
        game: describer_guesser
        policies: [describer, guesser]            # or {describer: {}, guesser: {model: path/to/hf_dir}}
        train_seats: [[describer, guesser]]       # who plays each seat (default: the policies in seat order)

Each policy is its own model with its own weights, optimizer (PolicyLearner), engine, reference
(when KL is on), warm-up and checkpoints, and is trained only on its own seats' trajectories
(reinforge.trainer.multi_policy_loop). Every policy starts from the run's model (model.path, or
the tiny model built from trainer.seed) warmed up on the demonstrations of its own seats, unless
its `model` names a Hugging Face directory of its own (then no warm-up for it). All policies share
one tokenizer: the game's messages are tokenized once per seat, as each policy reads them.

Run directory: `warm_start/<name>/`, `checkpoints/step_N/model/<name>/` (+ state.pt), `final/<name>/`,
each a Hugging Face model directory. The rest (metrics, samples, report) is as in a one-policy run.
"""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path

import torch

from reinforge.config import Config, ConfigError
from reinforge.envs.factory import build_env
from reinforge.games.spec import GameSpec, GameSpecError, parse_spec
from reinforge.models.loading import load_model_and_tokenizer, save_model
from reinforge.run import checkpoint as ckpt
from reinforge.run.graceful_stop import GracefulStop
from reinforge.run.task_fit import check_tasks_fit
from reinforge.tasks.registry import load_tasks
from reinforge.tasks.task import Task, TaskSplits
from reinforge.telemetry import logged_sft_seconds, print_summary, reward_curve_summary, run_time_rows
from reinforge.trainer.multi_policy_loop import PolicyParts, run_multi_policy_rl
from reinforge.trainer.sft import run_sft


def policy_names(cfg: Config) -> list[str]:
    """The trainable policies a game config names (one for every other run)."""
    if cfg.env.type != "game" or cfg.task.source != "game":
        return []
    try:
        return parse_spec(cfg.task.params)[0].policy_names
    except GameSpecError:
        return []  # the preflight reports it, naming the key


def is_multi_policy(cfg: Config) -> bool:
    return len(policy_names(cfg)) > 1


class PolicyModels:
    """Several policies saved as one checkpoint's `model/`: one Hugging Face directory per policy."""

    def __init__(self, models: dict, tokenizer):
        self.models, self.tokenizer = models, tokenizer

    def save_pretrained(self, directory: Path) -> None:
        for name, model in self.models.items():
            model.save_pretrained(Path(directory) / name)
            self.tokenizer.save_pretrained(Path(directory) / name)


class _PrefixedLogger:
    """A policy's warm-up logs under `policy/<name>/` (two warm-ups share the sft steps)."""

    def __init__(self, logger, prefix: str):
        self.logger, self.prefix = logger, prefix

    def log(self, step: int, metrics, stage: str) -> None:
        self.logger.log(step, {f"{self.prefix}{k}": v for k, v in metrics.items()}, stage=stage)


def same_vocabulary(tokenizer, other) -> bool:
    return tokenizer.get_vocab() == other.get_vocab() and tokenizer.chat_template == other.chat_template


def starting_models(cfg: Config, spec: GameSpec, tasks: TaskSplits, tokenizer) -> tuple[dict, object]:
    """Each policy's first weights: its own `model` directory, or the run's model (built or loaded
    once per policy, so each has weights of its own)."""
    from reinforge.run.pipeline import build_policy

    models, shared = {}, None
    for name in spec.policy_names:
        own = spec.policy_options(name).model
        if own is not None:
            model, own_tokenizer = load_model_and_tokenizer(own)
        else:
            model, own_tokenizer = build_policy(cfg, tasks, tokenizer)
        if shared is None:
            shared = own_tokenizer
        elif not same_vocabulary(shared, own_tokenizer):
            raise ConfigError(
                f"task.params.policies.{name}.model={own}: its tokenizer differs from the other policies' ({spec.policy_names[0]}); "
                "the policies of one run read the same tokenized game messages, so they must share one tokenizer"
            )
        models[name] = model
    return models, shared


def warm_up_tasks(tasks: list[Task], name: str) -> list[Task]:
    """The training tasks whose demonstration is a game played from one of `name`'s seats."""
    return [t for t in tasks if t.metadata["seats"][t.metadata["demo_seat"]] == name]


def run_multi_policy_training(cfg: Config, resume: bool = False, checkpoint: Path | None = None):
    from reinforge.run.pipeline import (
        TrainOutcome, build_engine, build_learner, build_reference, closing_env, open_logger, start_run, start_scorer,
    )

    run_dir = start_run(cfg, resuming=resume)
    spec, _ = parse_spec(cfg.task.params)
    names = spec.policy_names
    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed)
    tokenizer = check_tasks_fit(cfg, tasks)
    state = found = None
    if resume and (found := ckpt.latest_checkpoint(run_dir, checkpoint)) is not None:
        loaded = {name: load_model_and_tokenizer(str(found / "model" / name)) for name in names}
        models, tokenizer = {name: m for name, (m, _) in loaded.items()}, loaded[names[0]][1]
        state = ckpt.resume_from(run_dir, found)
    else:
        if resume:  # killed before its first checkpoint: start over, exactly as the first time
            ckpt.truncate_logs(run_dir, dict.fromkeys(ckpt.LOG_FILES, 0))
        models, tokenizer = starting_models(cfg, spec, tasks, tokenizer)
    models = {name: model.to(cfg.model.device) for name, model in models.items()}
    env = build_env(cfg, tokenizer)
    scorer = start_scorer(cfg)

    with closing_env(env), closing(scorer), open_logger(cfg, run_dir) as logger, GracefulStop() as stop:
        if state is None:
            start = time.perf_counter()
            for name in names:
                if spec.policy_options(name).model is not None:
                    continue  # it starts from its own model, as given
                mine = warm_up_tasks(tasks.train, name)
                if cfg.sft.steps and not mine:
                    raise ConfigError(f"task.params.policies.{name}: no training game has a warm-up from its seats; raise task.train_size")
                run_sft(models[name], env, mine, cfg.sft, cfg.trainer.seed, _PrefixedLogger(logger, f"policy/{name}/"),
                        cfg.telemetry.progress, stop)
                if cfg.sft.steps:
                    save_model(models[name], tokenizer, run_dir / "warm_start" / name)
            if cfg.sft.steps:
                logger.log(cfg.sft.steps, {"time/sft": time.perf_counter() - start}, stage="sft")
        sft_seconds = logged_sft_seconds(logger.history)

        policies = {}
        for i, name in enumerate(names):
            learner, _ = build_learner(cfg, models[name], env)  # workers.learners > 1 is refused for several policies
            policies[name] = PolicyParts(
                learner=learner,
                engine=build_engine(cfg, models[name], tokenizer.pad_token_id),
                reference=build_reference(cfg, models[name]),
                shuffle=torch.Generator().manual_seed(cfg.trainer.seed + i),
            )

        def save_models(step: int, loop_state: dict) -> Path:
            return ckpt.save_checkpoint(run_dir, step, PolicyModels(models, tokenizer), tokenizer, loop_state, cfg.trainer.keep_checkpoints)

        result = run_multi_policy_rl(policies, env, scorer, tasks, cfg, logger, run_dir, save_models, resume_state=state, stop=stop)
        for name in names:
            save_model(models[name], tokenizer, run_dir / "final" / name)

    before, after = result.evals[0], result.evals[-1]
    curve = reward_curve_summary(result.rewards)
    rows = [("held-out games", f"{len(tasks.eval)}")]
    for name in names:
        key = f"policy/{name}/accuracy"
        rows.append((f"{name}: not lost, warm start -> after RL", f"{before[key]:.1%} -> {after[key]:.1%}"))
    if "game/joint/win" in after:
        rows.append(("joint games won, warm start -> after RL", f"{before['game/joint/win']:.1%} -> {after['game/joint/win']:.1%}"))
    rows += [
        ("reward, first 10% of steps", f"{curve['first_10pct_mean']:.3f}"),
        ("reward, last 10% of steps", f"{curve['last_10pct_mean']:.3f}"),
        *run_time_rows(sft_seconds, result.seconds),
        ("run directory", str(run_dir)),
    ]
    print_summary(rows, title="reinforge train (" + ", ".join(names) + ")")
    return TrainOutcome(run_dir, before["accuracy"], after["accuracy"], result)
