"""The synchronous RL loop: sample groups, score, estimate advantages, update, evaluate.

Each step: the engine samples `group_size` responses for each of `prompts_per_step` tasks with
policy version v; rewards are scored; the advantage estimator turns them into per-sample
advantages; the learner takes `epochs x mini_batches` optimizer steps; the engine syncs to the
new version. The loop does not know which estimator or loss it runs: they come by name.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from reinforge.algos.kl import k3_kl
from reinforge.algos.policy_loss import ppo_clip_loss
from reinforge.algos.registry import get_estimator
from reinforge.config import Config
from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.single_turn import SingleTurnEnv
from reinforge.learner.batch import TrainingBatch, collate
from reinforge.learner.policy_learner import LossFn, PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.rewards.scorer import RewardScorer
from reinforge.rollout.single_turn import rollout_groups
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import TaskSplits
from reinforge.telemetry import MetricsLogger, ProgressDisplay
from reinforge.trainer.evaluation import evaluate
from reinforge.trainer.task_sampler import TaskSampler


@dataclass
class RLComponents:
    engine: Engine
    env: SingleTurnEnv
    learner: PolicyLearner
    scorer: RewardScorer
    reference: ReferenceModel | None = None


@dataclass
class RLResult:
    rewards: list[float] = field(default_factory=list)  # mean reward per step
    evals: list[dict] = field(default_factory=list)  # {"step": s, **eval metrics}
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("rollout", "reward", "advantage", "reference", "update", "eval"), 0.0))


def make_policy_loss(clip_eps: float, kl_coef: float) -> LossFn:
    def loss_fn(logprobs: torch.Tensor, entropy: torch.Tensor, micro: TrainingBatch, normalizer: float):
        loss, metrics = ppo_clip_loss(logprobs, micro.old_logprobs, micro.advantages, micro.loss_mask, clip_eps, normalizer)
        if kl_coef > 0:
            mask = micro.loss_mask.float()
            kl = (k3_kl(logprobs, micro.ref_logprobs) * mask).sum()
            loss = loss + kl_coef * kl / normalizer
            metrics["kl_ref"] = kl.item() / max(mask.sum().item(), 1.0)
        return loss, metrics

    return loss_fn


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
    estimator = get_estimator(cfg.algo.advantage)
    params = sampling_params(cfg, stop_token_ids)
    loss_fn = make_policy_loss(cfg.algo.clip_eps, cfg.algo.kl_coef)
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
            t0 = time.perf_counter()
            batch_tasks = sampler.next_batch(cfg.rollout.prompts_per_step)
            trajectories = rollout_groups(
                parts.engine, parts.env, batch_tasks, cfg.rollout.group_size, params,
                seed=cfg.trainer.seed * 1_000_003 + step,
            )
            t1 = time.perf_counter()
            reward_metrics = parts.scorer.score({t.id: t for t in batch_tasks}, trajectories)
            t2 = time.perf_counter()
            rewards = torch.tensor([t.reward for t in trajectories])
            group_ids = torch.tensor([t.group_id for t in trajectories])
            advantages, adv_metrics = estimator.fn(rewards, group_ids)
            batch = collate(trajectories, advantages, pad)
            t3 = time.perf_counter()
            if parts.reference is not None:
                batch.ref_logprobs = parts.reference.logprobs(batch)
            t4 = time.perf_counter()
            update_metrics: dict[str, float] = {}
            for _ in range(cfg.algo.epochs):
                order = torch.randperm(len(batch), generator=shuffle)
                for rows in order.chunk(cfg.algo.mini_batches):
                    update_metrics = parts.learner.train_step(batch.select(rows), loss_fn)
            parts.engine.sync_weights(parts.learner.version)
            t5 = time.perf_counter()

            phases = {"rollout": t1 - t0, "reward": t2 - t1, "advantage": t3 - t2, "reference": t4 - t3, "update": t5 - t4}
            for key, seconds in phases.items():
                result.seconds[key] += seconds
            sampled_tokens = sum(t.num_sampled_tokens for t in trajectories)
            metrics = {
                **reward_metrics, **adv_metrics, **update_metrics,
                "response_length": sampled_tokens / len(trajectories),
                "stop_frac": sum(t.finish_reason == "stop" for t in trajectories) / len(trajectories),
                "tokens_per_s": sampled_tokens / max(t1 - t0, 1e-9),
                "step_seconds": t5 - t0,
                "policy_version": float(parts.learner.version),
            }
            result.rewards.append(metrics["reward"])
            logger.log(step, metrics, stage="rl")
            if step % cfg.trainer.sample_every == 0 or step == 1:
                for trajectory in trajectories[: cfg.rollout.group_size]:
                    task = next(t for t in batch_tasks if t.id == trajectory.task_id)
                    samples_file.write(json.dumps(trajectory_record(step, trajectory, task.prompt)) + "\n")
                samples_file.flush()
            if step % cfg.eval.every == 0 or step == cfg.trainer.steps:
                metrics = {**metrics, **run_eval(step)}
            progress.update(step, metrics)
    return result
