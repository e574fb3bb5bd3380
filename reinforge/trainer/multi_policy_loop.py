"""The RL loop of several distinct trainable policies in one run (games: `task.params.policies`).

The same steps as reinforge.trainer.rl_loop, composed from the same parts, once per policy: every
step collects one batch of games in which each policy's seats are sampled by that policy's own
engine (reinforge.games.play), the game's rewards are scored once, and then each policy prepares
the batch of *its own* players' trajectories (advantages within its own groups, its own reference
for KL) and takes its own optimizer steps with its own learner, then syncs its own engine. A
policy never sees the other policies' tokens or gradients.

Metrics: the step's shared ones as the single-policy loop logs them (`reward`, `env/...`), and
each policy's own under `policy/<name>/...` (its reward, its loss, KL, entropy, log-prob gap,
groups dropped). A checkpoint holds each policy's weights (`model/<name>/`) and, in `state.pt`,
each one's optimizer, version, reference and mini-batch shuffle, with the shared sampler, scorer
and RNG states, so a resumed run reproduces the uninterrupted one bit for bit.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from reinforge.algos.advantages import get_estimator
from reinforge.config import Config
from reinforge.engines.base import Engine, release_sampling_memory
from reinforge.evals.evaluation import evaluate
from reinforge.games.env import GameEnv
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.rewards.scorer import RewardScorer
from reinforge.rollout.episode_metrics import step_metrics
from reinforge.rollout.trajectory import Trajectory
from reinforge.run import checkpoint as ckpt
from reinforge.run.graceful_stop import GracefulStop
from reinforge.run.resume_changes import load_optimizer_state, reward_spec, scorer_state_for
from reinforge.run.run_errors import RunInterrupted
from reinforge.tasks.task import Task, TaskSplits
from reinforge.telemetry import MetricsLogger, ProgressDisplay
from reinforge.trainer.advantage_step import prepare_batch
from reinforge.trainer.agent_failures import drop_failed_episodes
from reinforge.trainer.collect import collect_groups, step_seed
from reinforge.trainer.pf_ppo_step import pf_ppo_batch
from reinforge.trainer.policy_objective import make_policy_objective
from reinforge.trainer.reward_failures import drop_failed_samples
from reinforge.trainer.rl_loop import RLResult, episode_token_budget, record_eval, sampling_params, trajectory_record
from reinforge.trainer.task_sampler import TaskSampler


@dataclass
class PolicyParts:
    """One trainable policy: its learner (model + optimizer), its engine, its reference, its shuffle."""

    learner: PolicyLearner
    engine: Engine
    reference: ReferenceModel | None
    shuffle: torch.Generator


def owner(trajectory: Trajectory, task: Task, env: GameEnv) -> str:
    """The policy that played the trajectory's seat (its `agent` is the seat's role)."""
    roles = env.game(task.metadata["game"]).roles
    return task.metadata["seats"][roles.index(trajectory.agent)]


def policy_state(parts: PolicyParts) -> dict:
    return {
        "optimizer": parts.learner.optimizer.state_dict(),
        "learner_version": parts.learner.version,
        "reference": parts.reference.state_dict() if parts.reference is not None else None,
        "shuffle": parts.shuffle.get_state(),
    }


def restore_policy_state(parts: PolicyParts, state: dict) -> None:
    load_optimizer_state(parts.learner.optimizer, state["optimizer"])
    parts.learner.version = state["learner_version"]
    if parts.reference is not None:
        parts.reference.load_state_dict(state["reference"])
    parts.shuffle.set_state(state["shuffle"])


def train_policy(
    parts: PolicyParts, trajectories: list[Trajectory], cfg: Config, estimator, loss_fn, pad: int, step: int
) -> dict[str, float]:
    """One policy's share of a step: drop failed samples, advantages within its own groups, its updates."""
    algo = cfg.algo
    trained, metrics = drop_failed_samples(trajectories, cfg.reward.on_error, estimator.min_group_size > 1)
    trained, agent_drops = drop_failed_episodes(trained, estimator.min_group_size)
    metrics.update(agent_drops)
    if trained:
        weights = {c.name: c.weight for c in cfg.reward.components}
        batch, prepare_metrics = prepare_batch(trained, algo, estimator, weights, pad, parts.learner, parts.reference, None)
        metrics.update(prepare_metrics)
        batch, pf_metrics = pf_ppo_batch(batch, trained, algo, parts.shuffle)  # algo.pf_ppo, else the batch itself
        metrics.update(pf_metrics)
        for _ in range(algo.epochs):
            order = torch.randperm(len(batch), generator=parts.shuffle)
            for rows in order.chunk(algo.mini_batches):
                metrics.update(parts.learner.train_step(batch.select(rows), loss_fn))
    parts.engine.sync_weights(parts.learner.version)
    if parts.reference is not None and algo.ref_reset_every and step % algo.ref_reset_every == 0:
        parts.reference.update_toward(parts.learner.model, algo.ref_mixup_alpha)
    rewards = [t.reward for t in trajectories]
    metrics["reward"] = sum(rewards) / len(rewards)
    metrics["response_length"] = sum(t.num_sampled_tokens for t in trajectories) / len(trajectories)
    metrics["trajectories"] = float(len(trajectories))
    metrics["policy_version"] = float(parts.learner.version)
    return metrics


def run_multi_policy_rl(
    policies: dict[str, PolicyParts],
    env: GameEnv,
    scorer: RewardScorer,
    tasks: TaskSplits,
    cfg: Config,
    logger: MetricsLogger,
    run_dir: Path,
    save_models: Callable[[int, dict], Path],
    resume_state: dict | None = None,
    stop: GracefulStop | None = None,
) -> RLResult:
    """RL steps for every policy; `save_models(step, state)` writes a checkpoint of all of them."""
    stop = stop or GracefulStop()
    estimator = get_estimator(cfg.algo.advantage)
    loss_fn = make_policy_objective(cfg.algo)
    params = sampling_params(cfg, env.stop_token_ids)
    first_model = next(iter(policies.values())).learner.model
    max_episode_tokens = episode_token_budget(cfg, first_model)
    engines = {name: parts.engine for name, parts in policies.items()}
    sampler = TaskSampler(tasks.train, seed=cfg.trainer.seed)
    result = RLResult()
    pad = env.tokenizer.pad_token_id

    def run_eval(step: int) -> dict[str, float]:
        start = time.perf_counter()
        metrics, records = evaluate(
            engines, env, tasks.eval, cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens, cfg.eval.samples,
            cfg.rollout.temperature, seed=cfg.trainer.seed + 10_000 + step, max_episode_tokens=max_episode_tokens,
        )
        record_eval(run_dir, logger, result, step, metrics, records, time.perf_counter() - start)
        return metrics

    def save(step: int) -> Path:
        state = {
            "policies": {name: policy_state(parts) for name, parts in policies.items()},
            "sampler": sampler.state_dict(),
            "scorer": scorer.state_dict(),
            "rng": ckpt.rng_states(),
            "result": {"rewards": result.rewards, "evals": result.evals, "steps": result.steps, "seconds": result.seconds},
            "reward_spec": reward_spec(cfg.reward.components),
        }
        return save_models(step, state)

    first_step = 1
    if resume_state is not None:
        for name, parts in policies.items():
            restore_policy_state(parts, resume_state["policies"][name])
        sampler.load_state_dict(resume_state["sampler"])
        scorer.load_state_dict(scorer_state_for(resume_state["scorer"], resume_state.get("reward_spec"), reward_spec(cfg.reward.components)))
        ckpt.restore_rng_states(resume_state["rng"])
        result = RLResult(**resume_state["result"])
        first_step = resume_state["step"] + 1
    for parts in policies.values():
        parts.engine.sync_weights(parts.learner.version)

    every = cfg.trainer.checkpoint_every
    with open(run_dir / "samples.jsonl", "a") as samples_file, ProgressDisplay(
        cfg.trainer.steps, "RL", enabled=cfg.telemetry.progress
    ) as progress:
        if resume_state is None:
            progress.update(0, run_eval(0))
        for step in range(first_step, cfg.trainer.steps + 1):
            collected = collect_groups(
                engines, env, scorer, sampler, cfg.rollout.prompts_per_step, cfg.rollout.group_size, params,
                seed=step_seed(cfg.trainer.seed, step), dynamic_sampling=cfg.algo.dynamic_sampling,
                max_rounds=cfg.algo.max_sampling_rounds, max_episode_tokens=max_episode_tokens,
            )
            trajectories = collected.trajectories
            owners = [owner(t, collected.tasks[t.task_id], env) for t in trajectories]
            for parts in policies.values():  # each policy's update comes next, then its sync
                release_sampling_memory(parts.engine)
            t0 = time.perf_counter()
            per_policy: dict[str, float] = {}
            for name, parts in policies.items():
                mine = [t for t, who in zip(trajectories, owners) if who == name]
                if not mine:  # its seats were not in this step's games (mixed train_seats)
                    continue
                metrics = train_policy(parts, mine, cfg, estimator, loss_fn, pad, step)
                per_policy.update({f"policy/{name}/{key}": value for key, value in metrics.items()})
            update_seconds = time.perf_counter() - t0

            phases = {"rollout": collected.rollout_seconds, "reward": collected.reward_seconds, "prepare": 0.0, "update": update_seconds}
            for key, seconds in phases.items():
                result.seconds[key] += seconds
            metrics = {
                **collected.reward_metrics, **per_policy,
                **step_metrics(trajectories, collected.rollout_seconds, phases, tools=False),
            }
            result.rewards.append(metrics["reward"])
            result.steps.append(metrics)
            logger.log(step, metrics, stage="rl")
            if step % cfg.trainer.sample_every == 0 or step == 1:
                for trajectory, who in list(zip(trajectories, owners))[: cfg.rollout.group_size]:
                    # The seat's own first message: the task's prompt is its warm-up game's (another
                    # deal, another seat's view), not what this trajectory saw.
                    prompt = [{"role": "user", "content": trajectory.transcript[0]["text"]}]
                    samples_file.write(json.dumps({**trajectory_record(step, trajectory, prompt), "policy": who}) + "\n")
            if step % cfg.eval.every == 0 or step == cfg.trainer.steps:
                metrics = {**metrics, **run_eval(step)}
            progress.update(step, metrics)
            samples_file.flush()  # before any checkpoint records the file's length
            if stop.requested is not None:
                raise RunInterrupted(stop.requested, step, str(save(step)))
            if every and (step % every == 0 or step == cfg.trainer.steps):
                save(step)
    return result
