"""The RL loop: sample groups, score, estimate advantages, update, evaluate.

Each step: the engine samples `group_size` responses for each of `prompts_per_step` tasks with
policy version v (more rounds under dynamic sampling); rewards are scored; the batch gets its
reference log-probs, values and advantages; the learner takes `epochs x mini_batches` optimizer
steps (the critic one step per mini-batch); the engine syncs to the new version. The loop does
not know which estimator or loss it runs: they come by name from the config.

Which weights sample a step's batch, and when, is the schedule's business
(`reinforge.trainer.rollout_schedule`): sync as above, or async, where a producer thread samples
later steps with weights up to `trainer.max_staleness` versions old while the learner trains.

After each step (and its evaluation) the training-health monitors read the run's metric history
(`reinforge.trainer.health`): logged as monitor/*, and monitor.action may checkpoint or end the run.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from reinforge.algos.advantages import get_estimator
from reinforge.algos.logprob_gap import measured_gap_warning
from reinforge.config import Config
from reinforge.engines.base import Engine, SamplingParams
from reinforge.envs.base import Env
from reinforge.learner.critic_learner import CriticLearner
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.rewards.scorer import RewardScorer
from reinforge.rollout.episode_metrics import step_metrics
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import TaskSplits
from reinforge.telemetry import MetricsLogger, ProgressDisplay
from reinforge.run import checkpoint as ckpt
from reinforge.trainer.agent_failures import drop_failed_episodes
from reinforge.trainer.eval_progress import EvalCounter, eval_episode_total
from reinforge.trainer.group_diversity import group_diversity_metrics
from reinforge.trainer.health import STAGE as HEALTH_STAGE, HealthMonitor, announce
from reinforge.trainer.advantage_step import has_active_dropout, prepare_batch
from reinforge.run.resume_changes import load_optimizer_state, reward_spec, scorer_state_for
from reinforge.trainer.reward_failures import drop_failed_samples
from reinforge.trainer.rollout_schedule import make_schedule, staleness_metrics
from reinforge.evals.evaluation import evaluate
from reinforge.run.graceful_stop import GracefulStop
from reinforge.run.run_errors import RunInterrupted
from reinforge.trainer.pf_ppo_step import pf_ppo_batch
from reinforge.trainer.kl_coefficient import StepKLCoefficient
from reinforge.trainer.policy_objective import adaptive_entropy_coef, make_policy_objective
from reinforge.trainer.task_sampler import TaskSampler
from reinforge.trainer.zero_reward import zero_reward_warning
from reinforge.values.curriculum_sampler import CurriculumSampler, group_abs_advantages, make_task_sampler
from reinforge.values.value_heads import ValueHeadsCollector, build_value_heads

PHASES = ("rollout", "reward", "prepare", "update", "eval")


@dataclass
class RLComponents:
    engine: Engine
    env: Env
    learner: PolicyLearner
    scorer: RewardScorer
    reference: ReferenceModel | None = None
    critic: CriticLearner | None = None
    checkpoint_extras: dict = field(default_factory=dict)  # saved in every checkpoint's state (a LoRA base's digest)


@dataclass
class RLResult:
    rewards: list[float] = field(default_factory=list)  # mean reward per step
    evals: list[dict] = field(default_factory=list)  # {"step": s, **eval metrics}
    steps: list[dict] = field(default_factory=list)  # every step's metrics
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    stop_reason: str | None = None  # a training-health monitor ended the run early (monitor.action=stop)


def episode_token_budget(cfg: Config, model) -> int | None:
    """Multi-turn episodes stop at env.max_episode_tokens, or at the model's context."""
    if cfg.env.type == "single_turn":
        return None
    return cfg.env.max_episode_tokens or getattr(model.config, "max_position_embeddings", None)


def sampling_params(cfg: Config, stop_token_ids: tuple[int, ...]) -> SamplingParams:
    r = cfg.rollout
    return SamplingParams(r.max_new_tokens, r.temperature, r.top_p, r.top_k, stop_token_ids)


def trajectory_record(step: int, trajectory: Trajectory, prompt_text) -> dict:
    extra = {"turns": trajectory.transcript, "stats": trajectory.stats} if trajectory.transcript else {}
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
        "reward_failures": trajectory.reward_failures,
        **extra,
    }


def loop_state(parts: RLComponents, sampler: TaskSampler, shuffle: torch.Generator, result: RLResult, entropy_control=None) -> dict:
    """Everything besides the policy weights that step s+1 depends on."""
    return {
        "entropy_control": entropy_control.state_dict() if entropy_control is not None else None,
        "optimizer": parts.learner.optimizer.state_dict(),
        "learner_version": parts.learner.version,
        "reference": parts.reference.state_dict() if parts.reference is not None else None,
        "critic": (
            {"model": parts.critic.model.state_dict(), "optimizer": parts.critic.optimizer.state_dict()}
            if parts.critic is not None else None
        ),
        "sampler": sampler.state_dict(),
        "scorer": parts.scorer.state_dict(),
        "shuffle": shuffle.get_state(),
        "rng": ckpt.rng_states(),
        "result": {"rewards": result.rewards, "evals": result.evals, "steps": result.steps, "seconds": result.seconds},
        "env": parts.env.state_dict() if hasattr(parts.env, "state_dict") else None,  # a game's opponent pool
    }


def restore_loop_state(
    state: dict, parts: RLComponents, sampler: TaskSampler, shuffle: torch.Generator, cfg: Config, entropy_control=None
) -> RLResult:
    """Put back what `loop_state` saved; where the config was changed (--force), the config wins."""
    if entropy_control is not None and state.get("entropy_control") is not None:
        entropy_control.load_state_dict(state["entropy_control"])
    load_optimizer_state(parts.learner.optimizer, state["optimizer"])
    parts.learner.version = state["learner_version"]
    if parts.reference is not None:
        parts.reference.load_state_dict(state["reference"])
    if parts.critic is not None:
        parts.critic.model.load_state_dict(state["critic"]["model"])
        load_optimizer_state(parts.critic.optimizer, state["critic"]["optimizer"])
    sampler.load_state_dict(state["sampler"])
    parts.scorer.load_state_dict(scorer_state_for(state["scorer"], state.get("reward_spec"), reward_spec(cfg.reward.components)))
    shuffle.set_state(state["shuffle"])
    ckpt.restore_rng_states(state["rng"])
    if hasattr(parts.env, "load_state_dict"):
        parts.env.load_state_dict(state.get("env"))
    return RLResult(**state["result"])


def record_eval(run_dir: Path, logger, result: RLResult, step: int, metrics: dict, records: list[dict], seconds: float) -> None:
    """An evaluation's records (eval_samples.jsonl, read by `reinforge report`), time and metrics."""
    with open(run_dir / "eval_samples.jsonl", "a") as eval_file:
        eval_file.writelines(json.dumps({"step": step, **r}, default=str) + "\n" for r in records)
    result.seconds["eval"] += seconds
    result.evals.append({"step": step, **metrics})
    # time/eval: what the console summary adds up, so `reinforge report` (which reads the log,
    # the step-0 evaluation included) shows the same time.
    logger.log(step, {**metrics, "time/eval": seconds}, stage="eval")


def run_rl(
    parts: RLComponents,
    tasks: TaskSplits,
    cfg: Config,
    logger: MetricsLogger,
    run_dir: Path,
    resume_state: dict | None = None,
    stop: GracefulStop | None = None,
) -> RLResult:
    """Run RL steps; with `resume_state` (from a checkpoint), continue after its step. When `stop`
    has been requested (SIGINT / SIGTERM), end after the current step with a checkpoint."""
    stop = stop or GracefulStop()
    algo = cfg.algo
    estimator = get_estimator(algo.advantage)
    params = sampling_params(cfg, parts.env.stop_token_ids)
    max_episode_tokens = episode_token_budget(cfg, parts.learner.model)
    entropy_control = adaptive_entropy_coef(algo)  # trainer state (algo.adaptive_entropy), saved with the loop's
    loss_fn = make_policy_objective(algo, entropy_control)
    kl_coefficient = StepKLCoefficient(algo)  # algo.kl_coef, or an adaptive controller's (algo.kl_ctrl)
    reward_weights = {c.name: c.weight for c in cfg.reward.components}
    # Uniform, or PCL / DUMP with the prompt-value model (prompt_value section; reinforge.values).
    sampler = make_task_sampler(tasks.train, cfg.trainer.seed, cfg.prompt_value, parts.learner.model, parts.env)
    result = RLResult()
    eval_max_new = cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens
    pad = parts.env.tokenizer.pad_token_id
    shuffle = torch.Generator().manual_seed(cfg.trainer.seed)
    heads = build_value_heads(cfg, parts.learner.model)  # success head / turn progress (None when off)
    health = HealthMonitor(cfg)  # training-health detectors (monitor section; reinforge.monitors)

    def run_eval(step: int, progress: ProgressDisplay) -> dict[str, float]:
        start = time.perf_counter()
        total = eval_episode_total(parts.env, len(tasks.eval), cfg.eval.samples)
        progress.eval_started(total)
        # Counted where rows are episodes; an agent env keys its gateway by the engine: never a wrapper.
        engine = parts.engine if total is None else EvalCounter(parts.engine, progress.eval_advanced)
        try:
            metrics, records = evaluate(
                engine, parts.env, tasks.eval, eval_max_new, cfg.eval.samples, cfg.rollout.temperature, seed=cfg.trainer.seed + 10_000 + step, max_episode_tokens=max_episode_tokens,
                verify=parts.scorer.verify_responses,  # same place and timeout as the training rewards
                score_samples=heads.response_scores if heads is not None and heads.voting_ready else None,
            )
        finally:
            progress.eval_finished()
        record_eval(run_dir, logger, result, step, metrics, records, time.perf_counter() - start)
        return metrics

    if has_active_dropout(parts.learner.model):
        print(
            "dropout is off for RL: the policy samples, is scored and is updated in eval mode, so the "
            "update's ratio compares the policy that sampled with itself (SFT keeps the model's dropout)"
        )

    first_step = 1
    if resume_state is not None:
        result = restore_loop_state(resume_state, parts, sampler, shuffle, cfg, entropy_control)
        kl_coefficient.load_state_dict(resume_state.get("kl_control"))
        first_step = resume_state["step"] + 1
    parts.engine.sync_weights(parts.learner.version)
    schedule = make_schedule(  # sync, or async with bounded staleness (trainer.schedule)
        cfg, parts.engine, parts.env, parts.learner, parts.scorer, sampler, params, max_episode_tokens, first_step
    )
    if heads is not None:  # under async it runs on the producer thread, beside the weights that sampled
        schedule.collector = ValueHeadsCollector(schedule.collector, heads, cfg.rollout.group_size)
    if resume_state is not None:
        schedule.load_state_dict(resume_state.get("schedule"))
    updates_per_step = algo.epochs * algo.mini_batches

    def save(step: int) -> Path:
        schedule_state = schedule.state_dict()  # first: an async schedule drains, moving the sampler on
        state = {
            **loop_state(parts, sampler, shuffle, result, entropy_control), **parts.checkpoint_extras, "schedule": schedule_state,
            "reward_spec": reward_spec(cfg.reward.components),  # which rewards filled the cache, for a resume
            "kl_control": kl_coefficient.state_dict(),
        }
        return ckpt.save_checkpoint(run_dir, step, parts.learner.model, parts.env.tokenizer, state, cfg.trainer.keep_checkpoints)

    every = cfg.trainer.checkpoint_every
    with open(run_dir / "samples.jsonl", "a") as samples_file, ProgressDisplay(
        cfg.trainer.steps, "RL", enabled=cfg.telemetry.progress
    ) as progress, schedule:
        if resume_state is None:
            progress.update(0, run_eval(0, progress))
        for step in range(first_step, cfg.trainer.steps + 1):
            scheduled = schedule.collect(step)
            collected = scheduled.collected
            trajectories = collected.trajectories
            staleness = staleness_metrics(trajectories, parts.learner.version, updates_per_step, schedule.max_staleness)
            # Samples whose reward failed leave the loss (reward.on_error=drop), with their group
            # for group-relative estimators; they stay in samples.jsonl and the metrics.
            trained, drop_metrics = drop_failed_samples(trajectories, cfg.reward.on_error, estimator.min_group_size > 1)
            if hasattr(parts.env, "run_groups"):  # agent episodes without a result leave the loss alone, never scored 0
                trained, agent_drop_metrics = drop_failed_episodes(trained, estimator.min_group_size)
                drop_metrics.update(agent_drop_metrics)
            t0 = time.perf_counter()
            prepare_metrics: dict[str, float] = {}
            update_metrics: dict[str, float] = {}
            value_metrics: dict[str, float] = {}
            if trained:
                prompt_prior = sampler.prompt_prior(trained) if estimator.needs_prompt_values else None
                batch, prepare_metrics = prepare_batch(
                    trained, kl_coefficient.for_step(algo), estimator, reward_weights, pad, parts.learner, parts.reference, parts.critic, prompt_prior
                )
                kl_coefficient.mark(batch)
            if isinstance(sampler, CurriculumSampler):  # every group's outcome trains the value model (before the update)
                abs_advantages = group_abs_advantages(trained, batch.advantages, batch.loss_mask) if trained else None
                value_metrics = sampler.observe(trajectories, abs_advantages)
            if trained and algo.pf_ppo is not None:  # the update trains on rows re-drawn by reward
                batch, pf_metrics = pf_ppo_batch(batch, trained, algo, shuffle)
                prepare_metrics.update(pf_metrics)
            t1 = time.perf_counter()
            for _ in range(algo.epochs if trained else 0):  # nothing left to train on: no update this step
                order = torch.randperm(len(batch), generator=shuffle)
                for rows in order.chunk(algo.mini_batches):
                    mini = batch.select(rows)
                    update_metrics = parts.learner.train_step(mini, loss_fn)
                    if entropy_control is not None:  # an optimizer step ended: the coefficient moves
                        entropy_control.end_step()
                        update_metrics["entropy_coef"] = entropy_control.coef
                    if parts.critic is not None:
                        update_metrics.update(parts.critic.train_step(mini, mini.returns, mini.old_values))
            kl_metrics = kl_coefficient.observe(batch) if trained else {}  # the coefficient for the next step
            schedule.publish(step, parts.learner)
            # An env that keeps state across steps (a game's opponent pool snapshots the new weights).
            env_metrics = parts.env.after_step(step, parts.engine) or {} if hasattr(parts.env, "after_step") else {}
            if parts.reference is not None and algo.ref_reset_every and step % algo.ref_reset_every == 0:
                parts.reference.update_toward(parts.learner.model, algo.ref_mixup_alpha)
            t2 = time.perf_counter()

            phases = {"rollout": collected.rollout_seconds, "reward": collected.reward_seconds, "prepare": t1 - t0, "update": t2 - t1}
            for key, seconds in phases.items():
                result.seconds[key] += seconds
            metrics = {
                **collected.reward_metrics, **drop_metrics, **env_metrics, **prepare_metrics, **update_metrics, **staleness,
                **scheduled.metrics, **value_metrics, **kl_metrics,
                **step_metrics(trajectories, collected.rollout_seconds, phases, tools=hasattr(parts.env, "registry")),
                **group_diversity_metrics(trajectories),
                "policy_version": float(parts.learner.version),
            }
            if step == first_step and (warning := measured_gap_warning(metrics, algo.tis_cap)) is not None:
                print(f"reinforge: warning: {warning}", file=sys.stderr)
            if step == first_step and (warning := zero_reward_warning(trajectories, cfg)) is not None:
                print(f"reinforge: WARNING: {warning}", file=sys.stderr, flush=True)
            result.rewards.append(metrics["reward"])
            result.steps.append(metrics)
            logger.log(step, metrics, stage="rl")
            if step % cfg.trainer.sample_every == 0 or step == 1:
                for trajectory in trajectories[: cfg.rollout.group_size]:
                    prompt = collected.tasks[trajectory.task_id].prompt
                    samples_file.write(json.dumps(trajectory_record(step, trajectory, prompt)) + "\n")
            evaluated = step % cfg.eval.every == 0 or step == cfg.trainer.steps
            if evaluated:
                metrics = {**metrics, **run_eval(step, progress)}
            # After the evaluation (reward hacking reads it), before any checkpoint (which saves the readings).
            verdict = health.check(result.steps, result.evals)
            if verdict.metrics:
                result.steps[-1].update(verdict.metrics)
                logger.log(step, verdict.metrics, stage=HEALTH_STAGE)
            announce(step, verdict)
            if verdict.action == "stop" and not evaluated:  # the run ends here: its final evaluation
                metrics = {**metrics, **run_eval(step, progress)}
            progress.update(step, metrics)
            samples_file.flush()  # before any checkpoint records the file's length
            if stop.requested is not None:
                raise RunInterrupted(stop.requested, step, str(save(step)))  # always: a stop must be resumable
            if verdict.action in ("checkpoint", "stop") or (every and (step % every == 0 or step == cfg.trainer.steps)):
                save(step)
            if verdict.action == "stop":
                result.stop_reason = verdict.stop_reason(step)
                break
    return result
