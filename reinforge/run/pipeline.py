"""The train recipe: tasks -> model -> supervised warm-up -> GRPO -> held-out evaluation -> save.

This file only composes components; every piece lives in its own folder.
"""

from __future__ import annotations

import os
import time
from contextlib import closing, nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch

from reinforge.config import Config, ConfigError, dump_config
from reinforge.config.policies_schema import DEFAULT_POLICY
from reinforge.engines.torch_engine import TorchEngine
from reinforge.run.run_summary import several_policy_rows, summary_rows
from reinforge.run.env_factory import build_env
from reinforge.import_paths import is_in_memory
from reinforge.learner.critic_learner import CriticLearner
from reinforge.runtime.process_settings import configure_process
from reinforge.values.config_check import check_curriculum_tasks
from reinforge.learner.policy_learner import PolicyLearner
from reinforge.learner.reference import ReferenceModel
from reinforge.models import lora
from reinforge.models.loading import load_model_and_tokenizer, save_model
from reinforge.models.model_source import resolve_model_path
from reinforge.models.tiny_llama import build_tiny_llama
from reinforge.models.value_model import ValueModel
from reinforge.rewards.builtin import build_component
from reinforge.rewards.call_errors import RewardWorkerStartError
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.tasks.registry import load_tasks
from reinforge.tasks.task import Task, TaskSplits
from reinforge.telemetry import MetricsLogger, logged_sft_seconds, print_summary, run_time_rows
from reinforge.telemetry.wandb_sink import wandb_available
from reinforge.run.preflight import preflight
from reinforge.run.task_fit import check_tasks_fit, run_tokenizer
from reinforge.trainer.policy import Policy, PrefixedLogger, metric_prefix, policy_path
from reinforge.trainer.rl_loop import RLResult, episode_token_budget, run_rl
from reinforge.runtime import checkpoint as ckpt
from reinforge.evals.evaluation import evaluate, verifier_pool
from reinforge.runtime.graceful_stop import GracefulStop
from reinforge.runtime.run_errors import CheckpointError
from reinforge.trainer.sft import run_sft


@dataclass
class TrainOutcome:
    run_dir: Path
    accuracy_before: float
    accuracy_after: float
    rl: RLResult


def closing_env(env):
    """A context that closes `env` when it has a `close()` (the gateway env: its HTTP server and
    agent process), else does nothing."""
    return closing(env) if callable(getattr(env, "close", None)) else nullcontext(env)


def make_run_dir(cfg: Config) -> Path:
    run_dir = Path(cfg.trainer.output_dir or Path("runs") / time.strftime("%Y%m%d-%H%M%S"))
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg.trainer.output_dir = str(run_dir)  # the saved config names its own directory, for --resume
    (run_dir / "config.yaml").write_text(dump_config(cfg))
    return run_dir


def build_policy(cfg: Config, tasks: TaskSplits, tokenizer=None):
    """The user's local HF model, or a tokenizer (`tokenizer`, when check_tasks_fit trained it
    already) + tiny Llama built here from the task texts."""
    if cfg.model.path is not None:
        return load_model_and_tokenizer(cfg.model.path)
    tokenizer = tokenizer if tokenizer is not None else run_tokenizer(cfg, tasks)
    model = build_tiny_llama(tokenizer, cfg.model.preset, cfg.model.max_positions, seed=cfg.trainer.seed)
    return model, tokenizer


def same_vocabulary(tokenizer, other) -> bool:
    return tokenizer.get_vocab() == other.get_vocab() and tokenizer.chat_template == other.chat_template


def starting_model(cfg: Config, name: str, tasks: TaskSplits, tokenizer=None):
    """A policy's first weights: its own `policies.<name>.model`, or the run's model (built or
    loaded once per policy, so each has weights of its own)."""
    own = cfg.policies[name].model
    if own is None:
        return build_policy(cfg, tasks, tokenizer)
    return load_model_and_tokenizer(resolve_model_path(own, what=f"policies.{name}.model"))  # a directory, Hub id or GGUF file


def starting_models(cfg: Config, tasks: TaskSplits, tokenizer=None, load=None) -> tuple[dict, object]:
    """Every policy's model (`load(name)`, default: its starting model) and the one tokenizer they
    share: the game's messages are tokenized once per seat, as each policy reads them."""
    models, shared = {}, None
    for name in cfg.policies:
        model, own_tokenizer = load(name) if load is not None else starting_model(cfg, name, tasks, tokenizer)
        if shared is None:
            shared = own_tokenizer
        elif not same_vocabulary(shared, own_tokenizer):
            raise ConfigError(
                f"policies.{name}.model={cfg.policies[name].model}: its tokenizer differs from the other policies' "
                f"({next(iter(cfg.policies))}); the policies of one run read the same tokenized game messages, so they must share one tokenizer"
            )
        models[name] = model
    return models, shared


def warms_up(cfg: Config, name: str) -> bool:
    """A policy with a model of its own starts from it as given; the others are warmed up (sft.steps)."""
    return cfg.policies[name].model is None and cfg.sft.steps > 0


def lora_base_for_resume(cfg: Config, name: str, run_dir: Path, tasks: TaskSplits, tokenizer):
    """The frozen base a LoRA policy's checkpointed adapters sit on: its warm-up's result (saved in
    run_dir/warm_start[/name]), else the model it started from (its own, model.path, or the tiny
    model built again from the seed, exactly as the first time)."""
    if warms_up(cfg, name):
        return load_model_and_tokenizer(str(policy_path(run_dir / "warm_start", name, len(cfg.policies) > 1)))
    return starting_model(cfg, name, tasks, tokenizer)


def resumed_models(cfg: Config, run_dir: Path, found: Path, tasks: TaskSplits, tokenizer) -> tuple[dict, object]:
    """Every policy's weights at checkpoint `found` (a LoRA policy: its base; the adapter is loaded on it later)."""
    several = len(cfg.policies) > 1

    def load(name: str):
        if cfg.model.lora is not None:  # the checkpoint holds the adapter; the base is the run's own
            return lora_base_for_resume(cfg, name, run_dir, tasks, tokenizer)
        return load_model_and_tokenizer(str(policy_path(found / "model", name, several)))

    return starting_models(cfg, tasks, tokenizer, load)


def warm_up_tasks(tasks: list[Task], name: str, several: bool) -> list[Task]:
    """The training tasks a policy warms up on: all of them for one policy, else those whose
    demonstration is a game played from one of `name`'s seats."""
    if not several:
        return tasks
    return [t for t in tasks if t.metadata["seats"][t.metadata["demo_seat"]] == name]


def warm_up(cfg: Config, models: dict, env, tasks: TaskSplits, tokenizer, logger, stop, run_dir: Path) -> None:
    """Supervised warm-up of each policy on its own seats' demonstrations, saved in warm_start[/name]."""
    several = len(models) > 1
    start = time.perf_counter()
    for name, model in models.items():
        if cfg.policies[name].model is not None:
            continue  # it starts from its own model, as given
        mine = warm_up_tasks(tasks.train, name, several)
        if cfg.sft.steps and not mine:
            raise ConfigError(f"policies.{name}: no training game has a warm-up from its seats; raise task.train_size")
        prefix = metric_prefix(name, several)
        run_sft(model, env, mine, cfg.sft, cfg.trainer.seed, PrefixedLogger(logger, prefix) if prefix else logger,
                cfg.telemetry.progress, stop)
        if cfg.sft.steps:
            save_model(model, tokenizer, policy_path(run_dir / "warm_start", name, several))
    if several and cfg.sft.steps:  # one policy's warm-up logs its own time/sft; several share the sft steps
        logger.log(cfg.sft.steps, {"time/sft": time.perf_counter() - start}, stage="sft")


def attach_lora(cfg: Config, model, checkpoint: Path | None, state: dict | None, name: str = DEFAULT_POLICY):
    """`model` with LoRA adapters: fresh ones, or a checkpoint's (on the same base, checked by digest).
    Returns the model and the base digest a checkpoint records."""
    several = len(cfg.policies) > 1
    model = lora.apply_lora(model, cfg.model.lora, seed=cfg.trainer.seed)
    digest = lora.base_weights_digest(model)
    if checkpoint is not None:
        saved = (state["policies"][name] if several else state).get("lora_base_sha256")
        if saved != digest:
            own = cfg.policies[name].model
            raise CheckpointError(
                f"cannot resume {checkpoint}: its LoRA adapter was trained on a base model whose weights differ from the "
                f"one found now (SHA-256 {saved} in the checkpoint, {digest} now; the base is "
                f"{'warm_start/ in the run directory' if warms_up(cfg, name) else own or cfg.model.path or 'the tiny model built from trainer.seed'}). "
                "Restore that base, or start a new run"
            )
        lora.load_adapter(model, policy_path(checkpoint / "model", name, several))
    return model, digest


def log_trainable_params(logger: MetricsLogger, learner: PolicyLearner, prefix: str = "") -> None:
    """Logged once per run and policy (stage `setup`): how many weights the optimizer updates."""
    total = sum(p.numel() for p in learner.model.parameters())
    trained = learner.trainable_params
    logger.log(0, {f"{prefix}trainable_params": trained, f"{prefix}total_params": total}, stage="setup")
    print(f"{prefix}training {trained:,} of {total:,} weights ({trained / total:.1%})" + (" (LoRA adapters)" if lora.is_lora_model(learner.model) else ""))


def open_logger(cfg: Config, run_dir: Path) -> MetricsLogger:
    """JSONL always; TensorBoard and offline W&B as configured. `auto` turns W&B on when the
    package is installed and W&B's own switch (WANDB_MODE=disabled) does not turn it off."""
    wandb = cfg.telemetry.wandb == "on" or (
        cfg.telemetry.wandb == "auto" and wandb_available() and os.environ.get("WANDB_MODE") != "disabled"
    )
    return MetricsLogger(run_dir, tensorboard=cfg.telemetry.tensorboard, wandb=wandb, config=cfg.model_dump(mode="json"))


def build_reference(cfg: Config, model) -> ReferenceModel | None:
    needed = cfg.algo.kl_coef > 0 or cfg.algo.ace_alpha > 0
    a = cfg.algo
    return (
        ReferenceModel(
            model, a.micro_batch_size, cfg.rollout.temperature, a.compile_forward, a.pack_sequences, a.packed_kernels,
            logprob_chunk_tokens=a.logprob_chunk_tokens, max_tokens_per_microbatch=a.max_tokens_per_microbatch,
            logprob_max_tokens=a.logprob_max_tokens,
        )
        if needed
        else None
    )


def build_critic(cfg: Config, model, tokenizer) -> CriticLearner | None:
    c = cfg.critic
    if not c.enabled:
        return None
    bins = c.num_bins if c.loss == "hl_gauss" else None
    if c.trunk == "policy_copy":
        value_model = ValueModel.from_policy(model, num_bins=bins, support=c.support)
    else:
        value_model = ValueModel.from_config(tokenizer, c.preset, num_bins=bins, support=c.support, seed=cfg.trainer.seed)
    return CriticLearner(
        value_model, c.lr, cfg.algo.max_grad_norm, cfg.algo.micro_batch_size, loss=c.loss, clip_eps=c.clip_eps, support=c.support,
        max_tokens_per_microbatch=cfg.algo.max_tokens_per_microbatch,
    )


def build_engine(cfg: Config, model, pad_token_id: int):
    """The in-process TorchEngine, `workers.workers` Ray actors, or vLLM, behind the same Engine protocol."""
    w, e, r = cfg.workers, cfg.engine, cfg.rollout
    vllm = None
    if e.type == "vllm":
        vllm = dict(
            truncation=r.top_k > 0 or r.top_p < 1.0, kv_cache_gib=e.kv_cache_gib, startup_timeout_s=e.startup_timeout_s,
            timeout_s=e.timeout_s, enforce_eager=e.enforce_eager, threads=cfg.trainer.threads,
        )
        if w.workers == 0:
            from reinforge.engines.vllm_engine import VllmEngine  # vLLM is optional: imported only here

            return VllmEngine(model, pad_token_id, dtype=r.engine_dtype, **vllm)
    if w.workers > 0:
        from reinforge.distributed.ray_engine import RayEngine  # Ray is optional: imported only here

        return RayEngine(
            model, pad_token_id, w.workers, dtype=cfg.rollout.engine_dtype,
            timeout_s=w.timeout_s, address=w.address, cpus_per_worker=w.cpus_per_worker, decode_kernels=e.decode_kernels,
            startup_timeout_s=w.startup_timeout_s, vllm=vllm,
            # vLLM's GPU build owns a device: one per worker where the run is on GPUs
            gpus_per_worker=1.0 if vllm is not None and cfg.model.device.startswith("cuda") else 0.0,
        )
    # A sharded learner's rank 0 holds the policy's one full copy (the loop's model): the engine samples it, copying nothing.
    borrow = cfg.workers.sharding == "fsdp"
    return TorchEngine(model, pad_token_id, dtype=cfg.rollout.engine_dtype, decode_kernels=e.decode_kernels, borrow_weights=borrow)


def build_learners(cfg: Config, models: dict, env, critics: dict | None = None) -> tuple[dict[str, PolicyLearner], object]:
    """Each policy's learner, and the data-parallel group behind them when workers.learners > 1
    (else None): one group for the run, whose ranks hold a learner per policy, and one per
    policy's critic (`critics`: name -> CriticLearner or None; the group's: `group.critics`)."""
    a = cfg.algo
    kwargs = dict(
        lr=a.lr, weight_decay=a.weight_decay, max_grad_norm=a.max_grad_norm, micro_batch_size=a.micro_batch_size,
        bf16_autocast=a.bf16_autocast, temperature=cfg.rollout.temperature,
        max_response_tokens=cfg.rollout.max_new_tokens * env.max_turns, entropy_grad=a.entropy_coef > 0 or a.adaptive_entropy,
        compile_forward=a.compile_forward, lr_warmup_steps=a.lr_warmup_steps, pack_sequences=a.pack_sequences,
        packed_kernels=a.packed_kernels, logprob_chunk_tokens=a.logprob_chunk_tokens,
        max_tokens_per_microbatch=a.max_tokens_per_microbatch, activation_checkpointing=a.activation_checkpointing,
        logprob_max_tokens=a.logprob_max_tokens,
    )
    if cfg.workers.learners == 1:
        return {name: PolicyLearner(model, **kwargs) for name, model in models.items()}, None
    from reinforge.distributed.fsdp_policies import resolve_precision
    from reinforge.distributed.learner_group import FollowerSpec, LearnerGroup
    from reinforge.distributed.critic_group import critic_specs

    critics = critics or {}

    if cfg.workers.sharding == "fsdp":
        from reinforge.distributed.fsdp import decoder_layers

        for model in models.values():  # before any process starts: a model FSDP cannot split by layer
            try:
                decoder_layers(model)
            except ValueError as err:
                raise ConfigError(str(err)) from None

    spec = FollowerSpec(
        {name: model.config for name, model in models.items()}, kwargs, a, torch.get_num_threads(), cfg.workers.timeout_s, device=cfg.model.device,
        retain_freed_memory=cfg.trainer.retain_freed_memory, startup_timeout_s=cfg.workers.startup_timeout_s,
        lora=cfg.model.lora, lora_seed=cfg.trainer.seed, sharding=cfg.workers.sharding,
        fsdp_precision=resolve_precision(cfg.workers.fsdp_precision, cfg.model.device), fsdp_offload=cfg.workers.fsdp_offload,
        critics=critic_specs(critics),
    )
    if cfg.workers.learners_on_ray:  # ranks 1..N-1 as Ray actors on the cluster's nodes
        from reinforge.distributed.ray_learners import RayLearnerGroup

        group = RayLearnerGroup(cfg.workers.learners, spec, models, address=cfg.workers.address, cpus_per_rank=cfg.workers.cpus_per_worker)
    else:
        group = LearnerGroup(cfg.workers.learners, spec, models)
    try:
        group.add_critics(critics)  # the followers build theirs right after their policies
    except BaseException:
        group.close()
        raise
    return group.learners, group


def build_scorer(cfg: Config) -> RewardScorer:
    reward, w = cfg.reward, cfg.workers
    limits = dict(
        timeout_s=reward.timeout_s, max_error_fraction=reward.max_error_fraction, workers=reward.workers,
        combine=reward.combine, gates=reward.gates, clip=reward.clip, fallback=reward.fallback, cache=reward.cache,
        on_error=reward.on_error,
    )
    if w.reward_workers > 0:  # the same scorer; the reward functions' calls run in Ray actors
        from reinforge.distributed.ray_rewards import build_ray_scorer

        return build_ray_scorer(
            [(c.name, c.fn, c.weight, c.params) for c in reward.components], w.reward_workers,
            call_timeout_s=reward.timeout_s, start_timeout_s=w.startup_timeout_s or w.timeout_s, address=w.address,
            cpus_per_worker=w.cpus_per_worker, **limits,
        )
    components = []
    for c in reward.components:
        fn, group = build_component(c.fn, c.params)  # here too: flags, state, and in-process parts
        # A part handed over from Python without an import path reaches worker processes pickled.
        spec = None if is_in_memory(c.fn) else (c.fn, c.params)
        components.append(NamedReward(c.name, fn, c.weight, group=group, spec=spec))
    return RewardScorer(components, isolation=reward.isolation, **limits)


def start_scorer(cfg: Config) -> RewardScorer:
    """`build_scorer` with its reward workers started: a component that the workers cannot build
    (a user's module that does not import in them) stops the run here, before any training, as a
    config error naming the component (and no worker is left behind)."""
    try:
        scorer = build_scorer(cfg)
    except RewardWorkerStartError as err:
        raise reward_start_error(cfg, err) from None
    try:
        scorer.start()
    except RewardWorkerStartError as err:
        scorer.close()
        raise reward_start_error(cfg, err) from None
    except BaseException:
        scorer.close()
        raise
    return scorer


def reward_start_error(cfg: Config, err: RewardWorkerStartError) -> ConfigError:
    names = [c.name for c in cfg.reward.components]
    key = f"reward.components[{names.index(err.component)}] ({err.component})" if err.component in names else "reward"
    return ConfigError(f"{key}: {err}")


def start_run(cfg: Config, resuming: bool = False) -> Path:
    """Validate, seed, set threads, cores and allocator, create the run directory: what every command does first."""
    preflight(cfg, resuming=resuming)
    torch.manual_seed(cfg.trainer.seed)
    configure_process(cfg.trainer.threads, cfg.trainer.cpus, cfg.trainer.retain_freed_memory)
    return make_run_dir(cfg)


def build_policies(cfg: Config, models: dict, env, tokenizer, logger, found: Path | None, state: dict | None) -> dict[str, Policy]:
    """Each policy's learner (group), engine, reference, critic and LoRA adapters, by the same builders."""
    several = len(models) > 1
    critics, digests, trained = {}, {}, {}
    for name, model in models.items():
        critics[name] = build_critic(cfg, model, tokenizer)  # before LoRA: a policy-copy trunk is a plain model of its own
        digests[name] = None
        if cfg.model.lora is not None:  # the warm-up trained every weight; RL trains adapters on top
            model, digests[name] = attach_lora(cfg, model, found, state, name)
        trained[name] = model
    learners, learner_group = build_learners(cfg, trained, env, critics)  # one data-parallel group serves every policy
    if learner_group is not None:
        critics.update(learner_group.critics)  # data-parallel (and sharded) as the policy
    policies: dict[str, Policy] = {}
    try:
        for i, (name, model) in enumerate(trained.items()):
            policies[name] = Policy(
                learner=learners[name], engine=None, shuffle=torch.Generator().manual_seed(cfg.trainer.seed + i),
                critic=critics[name], learner_group=learner_group, lora_digest=digests[name],
            )
            if state is None:
                log_trainable_params(logger, learners[name], metric_prefix(name, several))
            policies[name].engine = build_engine(cfg, model, tokenizer.pad_token_id)
            policies[name].reference = build_reference(cfg, model)
    except BaseException:
        for policy in policies.values():  # the engines started so far
            policy.close()
        if learner_group is not None:  # no policy may hold it yet
            learner_group.close()
        raise
    return policies


def run_training(cfg: Config, resume: bool = False, checkpoint: Path | None = None) -> TrainOutcome:
    """The whole recipe, for every policy of `policies:`; with `resume`, continue the run in
    cfg.trainer.output_dir from its newest checkpoint (or `checkpoint`), producing what the
    uninterrupted run would have."""
    run_dir = start_run(cfg, resuming=resume)
    several = len(cfg.policies) > 1
    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed)
    tokenizer = check_tasks_fit(cfg, tasks)  # prompts and taught turns vs the budgets, before any model
    check_curriculum_tasks(cfg, tasks)  # PCL's pool, DUMP's distributions
    state = found = None
    if resume and (found := ckpt.latest_checkpoint(run_dir, checkpoint)) is not None:
        models, tokenizer = resumed_models(cfg, run_dir, found, tasks, tokenizer)
        state = ckpt.resume_from(run_dir, found)
    else:
        if resume:  # killed before its first checkpoint: start over, exactly as the first time
            ckpt.truncate_logs(run_dir, dict.fromkeys(ckpt.LOG_FILES, 0))
        models, tokenizer = starting_models(cfg, tasks, tokenizer)
    models = {name: model.to(cfg.model.device) for name, model in models.items()}
    env = build_env(cfg, tokenizer)
    scorer = start_scorer(cfg)  # before the warm-up: reward workers that cannot build a reward stop the run now

    # The env closes last, on every way out (an error, Ctrl-C, SIGTERM's RunInterrupted): a gateway
    # env's server and agent process end with the run.
    with closing_env(env), closing(scorer), open_logger(cfg, run_dir) as logger, GracefulStop() as stop:
        if state is None:
            warm_up(cfg, models, env, tasks, tokenizer, logger, stop, run_dir)
        sft_seconds = logged_sft_seconds(logger.history)  # as logged, so `reinforge report` agrees
        policies = build_policies(cfg, models, env, tokenizer, logger, found, state)
        try:
            result = run_rl(policies, env, scorer, tasks, cfg, logger, run_dir, resume_state=state, stop=stop)
        finally:
            for policy in policies.values():
                policy.close()
        for name, policy in policies.items():  # LoRA: the merged model, and the adapter in final/adapter
            save_model(policy.model, tokenizer, policy_path(run_dir / "final", name, several))

    rows = several_policy_rows(cfg, tasks, result) if several else summary_rows(cfg, tasks, result)
    rows += [*run_time_rows(sft_seconds, result.seconds), ("run directory", str(run_dir))]
    if result.stop_reason is not None:  # monitor.action=stop: the run ended before trainer.steps
        rows.insert(0, ("stopped early", f"{result.stop_reason}, of {cfg.trainer.steps} steps"))
    print_summary(rows, title="reinforge train" + (" (" + ", ".join(cfg.policies) + ")" if several else ""))
    before, after = result.evals[0], result.evals[-1]
    return TrainOutcome(run_dir, before["accuracy"], after["accuracy"], result)


def run_sft_stage(cfg: Config) -> Path:
    """`reinforge sft`: warm up, report held-out greedy accuracy, save to RUN_DIR/warm_start."""
    if len(names := list(cfg.policies)) > 1:
        raise ConfigError(
            f"policies={names}: `reinforge sft` warms up one model; `reinforge train` warms up each of "
            "several policies on its own seats (RUN_DIR/warm_start/<name>)"
        )
    run_dir = start_run(cfg)
    tasks = load_tasks(cfg.task, seed=cfg.trainer.seed)
    model, tokenizer = starting_model(cfg, names[0], tasks, check_tasks_fit(cfg, tasks))
    model = model.to(cfg.model.device)
    env = build_env(cfg, tokenizer)
    with closing_env(env), open_logger(cfg, run_dir) as logger:
        losses = run_sft(model, env, tasks.train, cfg.sft, cfg.trainer.seed, logger, cfg.telemetry.progress)
        engine = TorchEngine(model, tokenizer.pad_token_id)
        with verifier_pool(cfg.reward.workers, cfg.reward.timeout_s, cfg.reward.isolation) as verify:
            metrics, _ = evaluate(
                engine, env, tasks.eval, cfg.eval.max_new_tokens or cfg.rollout.max_new_tokens,
                cfg.eval.samples, cfg.rollout.temperature, seed=cfg.trainer.seed,
                max_episode_tokens=episode_token_budget(cfg, model), verify=verify,
            )
        logger.log(cfg.sft.steps, metrics, stage="eval")
    out = save_model(model, tokenizer, run_dir / "warm_start")
    k = cfg.eval.samples
    print_summary(
        [
            ("steps", str(cfg.sft.steps)),
            ("final loss", f"{losses[-1]:.4f}" if losses else "-"),
            ("held-out greedy accuracy", f"{metrics['accuracy']:.1%}"),
            (f"held-out mean@{k}", f"{metrics[f'mean@{k}']:.1%}"),
            ("model", str(out)),
        ],
        title="reinforge sft",
    )
    return out
