"""The synchronous RL loop: sample groups, score, estimate advantages, update, evaluate.

Each step: the engine samples `group_size` responses for each of `prompts_per_step` tasks with
policy version v (more rounds under dynamic sampling); rewards are scored; the batch gets its
reference log-probs, values and advantages; the learner takes `epochs x mini_batches` optimizer
steps (the critic one step per mini-batch); the engine syncs to the new version. The loop does
not know which estimator or loss it runs: they come by name from the config.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from reinforge.algos.advantages import get_estimator
from reinforge.config import Config
from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.learner.critic_learner import CriticLearner
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.rewards.scorer import RewardScorer
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import TaskSplits
from reinforge.telemetry import MetricsLogger, ProgressDisplay
from reinforge.trainer.advantage_step import prepare_batch
from reinforge.trainer.collect import collect_groups
from reinforge.trainer.evaluation import evaluate
from reinforge.trainer.policy_objective import make_policy_objective
from reinforge.trainer.task_sampler import TaskSampler

PHASES = ("rollout", "reward", "prepare", "update", "eval")


@dataclass
class RLComponents:
    engine: Engine
    env: SingleTurnEnv
    learner: PolicyLearner
    scorer: RewardScorer
    reference: ReferenceModel | None = None
    critic: CriticLearner | None = None


@dataclass
class RLResult:
    rewards: list[float] = field(default_factory=list)  # mean reward per step
    evals: list[dict] = field(default_factory=list)  # {"step": s, **eval metrics}
    steps: list[dict] = field(default_factory=list)  # every step's metrics
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))


def sampling_params(cfg: Config, stop_token_ids: tuple[int, ...]) -> SamplingParams:
    r = cfg.rollout
    return SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k, stop_token_ids)


def trajectory_record(step: int, trajectory: Trajectory, prompt_text) -> dict:
    return {
        "step": step,
        "task_id": trajectory.task_id,
        "group_id": trajectory.group_id,
        "prompt": prompt_text,
        "response": trajectory.response_text,
        "reward": trajectory.reward,
        "rewards": trajectory.rewards,
        "finish_reason": trajectory.finish_reason,
        "policy_version": trajectory.policy_version,
        "num_tokens": trajectory.num_sampled_tokens,
        "errors": trajectory.errors,
    }


def run_rl(
    parts: RLComponents,
    tasks: TaskSplits,
    cfg: Config,
    stop_token_ids: tuple[int, ...],
    logger: MetricsLogger,
    run_dir: Path,
) -> RLResult:
    algo = cfg.algo
    estimator = get_estimator(algo.advantage)
    params = sampling_params(cfg, stop_token_ids)
    loss_fn = make_policy_objective(algo)
    reward_weights = {c.name: c.weight for c in cfg.reward.components}
    sampler = TaskSampler(tasks.train, seed=cfg.trainer.seed)
    result = RLResult()
    eval_max_new = cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens
    pad = parts.env.tokenizer.pad_token_id
    shuffle = torch.Generator().manual_seed(cfg.trainer.seed)

    def run_eval(step: int) -> dict[str, float]:
        start = time.perf_counter()
        metrics, _ = evaluate(
            parts.engine, parts.env, tasks.eval, eval_max_new, stop_token_ids,
            cfg.eval.samples, cfg.rollout.temperature, seed=cfg.trainer.seed + 10_000 + step,
        )
        result.seconds["eval"] += time.perf_counter() - start
        result.evals.append({"step": step, **metrics})
        logger.log(step, metrics, stage="eval")
        return metrics

    parts.engine.sync_weights(parts.learner.version)
    with open(run_dir / "samples.jsonl", "a") as samples_file, ProgressDisplay(
        cfg.trainer.steps, "RL", enabled=cfg.telemetry.progress
    ) as progress:
        progress.update(0, run_eval(0))
        for step in range(1, cfg.trainer.steps + 1):
            collected = collect_groups(
                parts.engine, parts.env, parts.scorer, sampler, cfg.rollout.prompts_per_step,
                cfg.rollout.group_size, params, seed=cfg.trainer.seed * 1_000_003 + step,
                dynamic_sampling=algo.dynamic_sampling, max_rounds=algo.max_sampling_rounds,
            )
            trajectories = collected.trajectories
            t0 = time.perf_counter()
            batch, prepare_metrics = prepare_batch(
                trajectories, algo, estimator, reward_weights, pad, parts.learner, parts.reference, parts.critic
            )
            t1 = time.perf_counter()
            update_metrics: dict[str, float] = {}
            for _ in range(algo.epochs):
                order = torch.randperm(len(batch), generator=shuffle)
                for rows in order.chunk(algo.mini_batches):
                    mini = batch.select(rows)
                    update_metrics = parts.learner.train_step(mini, loss_fn)
                    if parts.critic is not None:
                        update_metrics.update(parts.critic.train_step(mini, mini.returns, mini.old_values))
            parts.engine.sync_weights(parts.learner.version)
            if parts.reference is not None and algo.ref_reset_every and step % algo.ref_reset_every == 0:
                parts.reference.reset_to(parts.learner.model)
            t2 = time.perf_counter()

            phases = {"rollout": collected.rollout_seconds, "reward": collected.reward_seconds, "prepare": t1 - t0, "update": t2 - t1}
            for key, seconds in phases.items():
                result.seconds[key] += seconds
            sampled_tokens = sum(t.num_sampled_tokens for t in trajectories)
            metrics = {
                **collected.reward_metrics, **prepare_metrics, **update_metrics,
                "response_length": sampled_tokens / len(trajectories),
                "stop_frac": sum(t.finish_reason == "stop" for t in trajectories) / len(trajectories),
                "tokens_per_s": sampled_tokens / max(collected.rollout_seconds, 1e-9),
                "step_seconds": sum(phases.values()),
                "policy_version": float(parts.learner.version),
            }
            result.rewards.append(metrics["reward"])
            result.steps.append(metrics)
            logger.log(step, metrics, stage="rl")
            if step % cfg.trainer.sample_every == 0 or step == 1:
                for trajectory in trajectories[: cfg.rollout.group_size]:
                    prompt = collected.tasks[trajectory.task_id].prompt
                    samples_file.write(json.dumps(trajectory_record(step, trajectory, prompt)) + "\n")
                samples_file.flush()
            if step % cfg.eval.every == 0 or step == cfg.trainer.steps:
                metrics = {**metrics, **run_eval(step)}
            progress.update(step, metrics)
    return result
