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
from reinforge.engines.base import SamplingParams
from reinforge.envs.base import Env
from reinforge.rewards.scorer import RewardScorer
from reinforge.rollout.episode_metrics import step_metrics
from reinforge.rollout.trajectory import Trajectory
from reinforge.tasks.task import TaskSplits
from reinforge.telemetry import MetricsLogger, ProgressDisplay
from reinforge.runtime import checkpoint as ckpt
from reinforge.trainer.agent_failures import drop_failed_episodes
from reinforge.trainer.eval_progress import EvalCounter, eval_episode_total
from reinforge.trainer.group_diversity import group_diversity_metrics
from reinforge.trainer.health import STAGE as HEALTH_STAGE, HealthMonitor, announce
from reinforge.trainer.advantage_step import has_active_dropout, prepare_batch
from reinforge.runtime.resume_changes import reward_spec, scorer_state_for
from reinforge.trainer.reward_failures import drop_failed_samples
from reinforge.trainer.rollout_schedule import make_schedule, schedule_lag, staleness_metrics
from reinforge.evals.evaluation import evaluate
from reinforge.runtime.graceful_stop import GracefulStop
from reinforge.runtime.run_errors import RunInterrupted
from reinforge.trainer.pf_ppo_step import pf_ppo_batch
from reinforge.trainer.policy import Policy, PolicyModels, for_policies, metric_prefix, owner
from reinforge.trainer.kl_coefficient import StepKLCoefficient
from reinforge.learner.policy_objective import adaptive_entropy_coef, make_policy_objective
from reinforge.trainer.zero_reward import zero_reward_warning
from reinforge.values.curriculum_collector import CurriculumCollector
from reinforge.values.curriculum_sampler import CurriculumSampler
from reinforge.values.group_advantages import merged_group_abs_advantages
from reinforge.values.sampler_factory import make_task_sampler
from reinforge.values.value_heads import ValueHeadsCollector, build_value_heads

PHASES = ("rollout", "reward", "prepare", "update", "eval")


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


def record_eval(run_dir: Path, logger, result: RLResult, step: int, metrics: dict, records: list[dict], seconds: float) -> None:
    """An evaluation's records (eval_samples.jsonl, read by `reinforge report`), time and metrics."""
    with open(run_dir / "eval_samples.jsonl", "a") as eval_file:
        eval_file.writelines(json.dumps({"step": step, **r}, default=str) + "\n" for r in records)
    result.seconds["eval"] += seconds
    result.evals.append({"step": step, **metrics})
    # time/eval: what the console summary adds up, so `reinforge report` (which reads the log,
    # the step-0 evaluation included) shows the same time.
    logger.log(step, {**metrics, "time/eval": seconds}, stage="eval")


class Objective:
    """A policy's loss and the trainer state that moves it: the adaptive entropy coefficient
    (algo.adaptive_entropy) and the KL coefficient (algo.kl_coef, or algo.kl_ctrl's controller)."""

    def __init__(self, algo):
        self.entropy_control = adaptive_entropy_coef(algo)
        self.loss_fn = make_policy_objective(algo, self.entropy_control)
        self.kl_coefficient = StepKLCoefficient(algo)

    def state_dict(self) -> dict:
        return {
            "entropy_control": self.entropy_control.state_dict() if self.entropy_control is not None else None,
            "kl_control": self.kl_coefficient.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        if self.entropy_control is not None and state.get("entropy_control") is not None:
            self.entropy_control.load_state_dict(state["entropy_control"])
        self.kl_coefficient.load_state_dict(state.get("kl_control"))


def seat_share_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """A policy's own share of a step of several policies (the step's totals are logged unprefixed)."""
    return {
        "reward": sum(t.reward for t in trajectories) / len(trajectories),
        "response_length": sum(t.num_sampled_tokens for t in trajectories) / len(trajectories),
        "trajectories": float(len(trajectories)),
    }


def run_rl(
    policies: dict[str, Policy],
    env: Env,
    scorer: RewardScorer,
    tasks: TaskSplits,
    cfg: Config,
    logger: MetricsLogger,
    run_dir: Path,
    resume_state: dict | None = None,
    stop: GracefulStop | None = None,
) -> RLResult:
    """Run RL steps for every policy; with `resume_state` (from a checkpoint), continue after its
    step. When `stop` has been requested (SIGINT / SIGTERM), end after the current step with a
    checkpoint. Several policies (a game's seats): every step plays one batch of games, each seat
    sampled by its owner's engine, scores it once, and each policy trains on its own seats'
    trajectories only (its own groups, reference, critic and optimizer)."""
    stop = stop or GracefulStop()
    algo = cfg.algo
    several = len(policies) > 1
    first = next(iter(policies.values()))
    engines = for_policies({name: p.engine for name, p in policies.items()})
    estimator = get_estimator(algo.advantage)
    params = sampling_params(cfg, env.stop_token_ids)
    max_episode_tokens = episode_token_budget(cfg, first.model)
    objectives = {name: Objective(algo) for name in policies}  # trainer state, saved with the loop's
    reward_weights = {c.name: c.weight for c in cfg.reward.components}
    # Uniform, or PCL / DUMP with the prompt-value model (prompt_value section; reinforge.values; a value model per policy).
    sampler = make_task_sampler(
        tasks.train, cfg.trainer.seed, cfg.prompt_value, {name: p.model for name, p in policies.items()}, env, cfg.env.type,
        {name: metric_prefix(name, several) for name in policies},
    )
    result = RLResult()
    eval_max_new = cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens
    pad = env.tokenizer.pad_token_id
    heads = build_value_heads(cfg, {name: p.model for name, p in policies.items()})  # success head / turn progress (None when off)
    # Training-health detectors (monitor section; reinforge.monitors) read one policy's metric names;
    # with several (metrics under policy/<name>/) they do not run (monitor.action=warn only, preflight).
    health = HealthMonitor(cfg) if not several else None

    def run_eval(step: int, progress: ProgressDisplay) -> dict[str, float]:
        start = time.perf_counter()
        total = eval_episode_total(env, len(tasks.eval), cfg.eval.samples)
        progress.eval_started(total)
        # Counted where rows are episodes; an agent env keys its gateway by the engine: never a wrapper.
        engine = engines if total is None else EvalCounter(engines, progress.eval_advanced)
        try:
            metrics, records = evaluate(
                engine, env, tasks.eval, eval_max_new, cfg.eval.samples, cfg.rollout.temperature, seed=cfg.trainer.seed + 10_000 + step, max_episode_tokens=max_episode_tokens,
                verify=scorer.verify_responses,  # same place and timeout as the training rewards
                score_samples=heads.response_scores if heads is not None and heads.voting_ready else None,
            )
        finally:
            progress.eval_finished()
        record_eval(run_dir, logger, result, step, metrics, records, time.perf_counter() - start)
        return metrics

    if any(has_active_dropout(p.model) for p in policies.values()):
        print(
            "dropout is off for RL: the policy samples, is scored and is updated in eval mode, so the "
            "update's ratio compares the policy that sampled with itself (SFT keeps the model's dropout)"
        )

    first_step = 1
    if resume_state is not None:
        for name, policy in policies.items():
            state = resume_state["policies"][name] if several else resume_state  # one policy: the top level
            objectives[name].load_state_dict(state)
            policy.load_state_dict(state)
        sampler.load_state_dict(resume_state["sampler"])
        scorer.load_state_dict(scorer_state_for(resume_state["scorer"], resume_state.get("reward_spec"), reward_spec(cfg.reward.components)))
        ckpt.restore_rng_states(resume_state["rng"])
        if hasattr(env, "load_state_dict"):
            env.load_state_dict(resume_state.get("env"))
        result = RLResult(**resume_state["result"])
        first_step = resume_state["step"] + 1
    for policy in policies.values():
        policy.engine.sync_weights(policy.learner.version)
    learners = for_policies({name: p.learner for name, p in policies.items()})
    schedule = make_schedule(  # sync, or async with bounded staleness (trainer.schedule; a lane per policy)
        cfg, engines, env, learners, scorer, sampler, params, max_episode_tokens, first_step
    )
    if heads is not None:  # under async it runs on the producer thread, beside the weights that sampled
        schedule.collector = ValueHeadsCollector(  # several policies: a success head each, on its own seats
            schedule.collector, heads, cfg.rollout.group_size,
            owner=lambda t, tasks_by_id: owner(t, tasks_by_id[t.task_id], env), prefix=lambda name: metric_prefix(name, several),
        )
    if isinstance(sampler, CurriculumSampler):  # draws pinned to the sampling weights' version (async: the producer's)
        schedule.collector = CurriculumCollector(schedule.collector, sampler, schedule_lag(cfg), first_step)
    if resume_state is not None:
        schedule.load_state_dict(resume_state.get("schedule"))
    updates_per_step = algo.epochs * algo.mini_batches

    def save(step: int) -> Path:
        schedule_state = schedule.state_dict()  # first: an async schedule drains, moving the sampler on
        per_policy = {name: {**objectives[name].state_dict(), **p.state_dict()} for name, p in policies.items()}
        state = {
            **(for_policies(per_policy) if not several else {"policies": per_policy}),
            "sampler": sampler.state_dict(),
            "scorer": scorer.state_dict(),
            "rng": ckpt.rng_states(),
            "result": {"rewards": result.rewards, "evals": result.evals, "steps": result.steps, "seconds": result.seconds},
            "env": env.state_dict() if hasattr(env, "state_dict") else None,  # a game's opponent pool
            "schedule": schedule_state,
            "reward_spec": reward_spec(cfg.reward.components),  # which rewards filled the cache, for a resume
        }
        models = for_policies({name: p.model for name, p in policies.items()})
        models = PolicyModels(models, env.tokenizer) if several else models
        group = next(iter(policies.values())).learner_group  # the run's; a sharded one's ranks write their shards
        return ckpt.save_checkpoint(
            run_dir, step, models, env.tokenizer, state, cfg.trainer.keep_checkpoints, write_parts=group.write_shards if group is not None else None,
        )

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
            owners = [owner(t, collected.tasks[t.task_id], env) for t in trajectories] if several else None
            per_policy: dict[str, float] = {}
            value_metrics: dict[str, float] = {}
            advantage_rows: list = []  # (trained, advantages, mask) of each policy: DUMP's learnability per group
            prepare_seconds = update_seconds = 0.0
            for name, policy in policies.items():
                mine = [t for t, who in zip(trajectories, owners) if who == name] if several else trajectories
                if not mine:  # its seats were not in this step's games (mixed train_seats)
                    continue
                objective = objectives[name]
                staleness = staleness_metrics(mine, policy.learner.version, updates_per_step, schedule.max_staleness)
                # Samples whose reward failed leave the loss (reward.on_error=drop), with their group
                # for group-relative estimators; they stay in samples.jsonl and the metrics.
                trained, drop_metrics = drop_failed_samples(mine, cfg.reward.on_error, estimator.min_group_size > 1)
                if hasattr(env, "run_groups"):  # agent episodes without a result leave the loss alone, never scored 0
                    trained, agent_drop_metrics = drop_failed_episodes(trained, estimator.min_group_size)
                    drop_metrics.update(agent_drop_metrics)
                t0 = time.perf_counter()
                prepare_metrics: dict[str, float] = {}
                update_metrics: dict[str, float] = {}
                if trained:
                    prompt_prior = sampler.prompt_prior(trained) if estimator.needs_prompt_values else None
                    batch, prepare_metrics = prepare_batch(
                        trained, objective.kl_coefficient.for_step(algo), estimator, reward_weights, pad, policy.learner,
                        policy.reference, policy.critic, prompt_prior,
                    )
                    objective.kl_coefficient.mark(batch)
                if isinstance(sampler, CurriculumSampler) and trained:
                    advantage_rows.append((trained, batch.advantages.detach().clone(), batch.loss_mask))
                if trained and algo.pf_ppo is not None:  # the update trains on rows re-drawn by reward
                    batch, pf_metrics = pf_ppo_batch(batch, trained, algo, policy.shuffle)
                    prepare_metrics.update(pf_metrics)
                t1 = time.perf_counter()
                for _ in range(algo.epochs if trained else 0):  # nothing left to train on: no update this step
                    order = torch.randperm(len(batch), generator=policy.shuffle)
                    for rows in order.chunk(algo.mini_batches):
                        mini = batch.select(rows)
                        update_metrics = policy.learner.train_step(mini, objective.loss_fn)
                        if objective.entropy_control is not None:  # an optimizer step ended: the coefficient moves
                            objective.entropy_control.end_step()
                            update_metrics["entropy_coef"] = objective.entropy_control.coef
                        if policy.critic is not None:
                            update_metrics.update(policy.critic.train_step(mini, mini.returns, mini.old_values))
                kl_metrics = objective.kl_coefficient.observe(batch) if trained else {}  # the coefficient for the next step
                prepare_seconds += t1 - t0
                update_seconds += time.perf_counter() - t1
                own = {
                    **drop_metrics, **prepare_metrics, **update_metrics, **staleness, **kl_metrics,
                    **(seat_share_metrics(mine) if several else {}), "policy_version": float(policy.learner.version),
                }
                per_policy.update({metric_prefix(name, several) + key: value for key, value in own.items()})
            if isinstance(sampler, CurriculumSampler):  # every seat's outcome trains its policy's value model, once a step
                # ... the groups dynamic sampling dropped included (the model must see the easy and hopeless ones)
                abs_advantages = merged_group_abs_advantages(advantage_rows) if advantage_rows else None
                value_metrics = sampler.observe(trajectories + collected.dropped, abs_advantages, step=step)
            t1 = time.perf_counter()
            schedule.publish(step, learners)
            # An env that keeps state across steps (a game's opponent pool snapshots the new weights).
            env_metrics = env.after_step(step, engines) or {} if hasattr(env, "after_step") else {}
            for policy in policies.values():
                if policy.reference is not None and algo.ref_reset_every and step % algo.ref_reset_every == 0:
                    policy.reference.update_toward(policy.learner.model, algo.ref_mixup_alpha)
            update_seconds += time.perf_counter() - t1

            phases = {"rollout": collected.rollout_seconds, "reward": collected.reward_seconds, "prepare": prepare_seconds, "update": update_seconds}
            for key, seconds in phases.items():
                result.seconds[key] += seconds
            metrics = {
                **collected.reward_metrics, **env_metrics, **scheduled.metrics, **value_metrics, **per_policy,
                **step_metrics(trajectories, collected.rollout_seconds, phases, tools=hasattr(env, "registry")),
                **group_diversity_metrics(trajectories),
            }
            if step == first_step and (warning := measured_gap_warning(metrics, algo.tis_cap)) is not None:
                print(f"reinforge: warning: {warning}", file=sys.stderr)
            if step == first_step and (warning := zero_reward_warning(trajectories, cfg)) is not None:
                print(f"reinforge: WARNING: {warning}", file=sys.stderr, flush=True)
            result.rewards.append(metrics["reward"])
            result.steps.append(metrics)
            logger.log(step, metrics, stage="rl")
            if step % cfg.trainer.sample_every == 0 or step == 1:
                for i, trajectory in enumerate(trajectories[: cfg.rollout.group_size]):
                    if several:  # the seat's own first message: the task's prompt is its warm-up game's (another deal, another seat's view)
                        prompt = [{"role": "user", "content": trajectory.transcript[0]["text"]}]
                        record = {**trajectory_record(step, trajectory, prompt), "policy": owners[i]}
                    else:
                        record = trajectory_record(step, trajectory, collected.tasks[trajectory.task_id].prompt)
                    samples_file.write(json.dumps(record) + "\n")
            evaluated = step % cfg.eval.every == 0 or step == cfg.trainer.steps
            if evaluated:
                metrics = {**metrics, **run_eval(step, progress)}
            # After the evaluation (reward hacking reads it), before any checkpoint (which saves the readings).
            verdict = health.check(result.steps, result.evals) if health is not None else None
            if verdict is not None:
                if verdict.metrics:
                    result.steps[-1].update(verdict.metrics)
                    logger.log(step, verdict.metrics, stage=HEALTH_STAGE)
                announce(step, verdict)
                if verdict.action == "stop" and not evaluated:  # the run ends here: its final evaluation
                    metrics = {**metrics, **run_eval(step, progress)}
            action = verdict.action if verdict is not None else None
            progress.update(step, metrics)
            samples_file.flush()  # before any checkpoint records the file's length
            if stop.requested is not None:
                raise RunInterrupted(stop.requested, step, str(save(step)))  # always: a stop must be resumable
            if action in ("checkpoint", "stop") or (every and (step % every == 0 or step == cfg.trainer.steps)):
                save(step)
            if action == "stop":
                result.stop_reason = verdict.stop_reason(step)
                break
    return result
