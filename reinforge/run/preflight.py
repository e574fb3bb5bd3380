"""Checks that run before any model is loaded (invariant 3: validate before compute)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from reinforge.algos.advantages import get_estimator
from reinforge.algos.losses.aggregation import AGGREGATIONS
from reinforge.algos.losses.policy import REQUIRED_AGGREGATION, get_policy_loss
from reinforge.algos.losses.value import get_value_loss
from reinforge.config import Config, ConfigError
from reinforge.config.output_dir import check_output_dir
from reinforge.config.policies_schema import check_policies_play_a_game
from reinforge.distributed.ray_cluster import INSTALL_HINT, ray_available
from reinforge.engines.torch_engine import MAX_BATCH_SIZE
from reinforge.run.env_factory import check_env_config
from reinforge.models.loading import ModelLoadError, check_causal_lm_dir
from reinforge.models.model_source import resolve_model_path
from reinforge.models import lora
from reinforge.models.tiny_llama import PRESETS, tiny_llama_skeleton
from reinforge.monitors.config_check import check_monitor_config
from reinforge.rewards.builtin import build_component
from reinforge.tasks.registry import check_task_config
from reinforge.values.config_check import check_prompt_value
from reinforge.telemetry.wandb_sink import wandb_available
from reinforge.values.value_heads_check import check_value_heads
from reinforge.run.memory_check import check_memory_fit, prompt_lower_bound
from reinforge.run.advantage_options_check import check_advantage_options
from reinforge.run.selection_check import check_selection
from reinforge.run.sharding_check import check_sharding
from reinforge.run.task_fit import check_jsonl_texts, check_prompt_lengths  # noqa: F401 - check_prompt_lengths re-exported


def preflight(cfg: Config, resuming: bool = False) -> None:
    """Raise ConfigError naming the key and the fix for every config that cannot run."""
    check_policies_play_a_game(cfg)
    check_task_config(cfg.task)
    check_env_config(cfg)

    try:
        estimator = get_estimator(cfg.algo.advantage)
    except ValueError as err:
        raise ConfigError(f"algo.advantage: {err}") from None
    if cfg.rollout.group_size < estimator.min_group_size:
        raise ConfigError(
            f"rollout.group_size={cfg.rollout.group_size} but algo.advantage={cfg.algo.advantage!r} compares "
            f"samples within a group and needs group_size >= {estimator.min_group_size}"
        )
    check_algorithm(cfg)
    check_advantage_options(cfg)
    check_prompt_value(cfg, estimator.needs_prompt_values)
    check_rollout_correction(cfg.algo)
    check_selection(cfg)
    check_schedule(cfg)
    check_value_heads(cfg)
    check_device(cfg)
    check_sharding(cfg)
    check_monitor_config(cfg, len(cfg.policies) > 1)
    for warning in engine_gap_warnings(cfg):
        print(f"reinforge: warning: {warning}", file=sys.stderr)
    samples = cfg.rollout.prompts_per_step * cfg.rollout.group_size
    if samples % cfg.algo.mini_batches:
        raise ConfigError(
            f"algo.mini_batches={cfg.algo.mini_batches} does not divide the {samples} samples per step "
            f"(rollout.prompts_per_step x rollout.group_size); pick a divisor of {samples}"
        )
    if samples // cfg.algo.mini_batches < cfg.workers.learners:
        raise ConfigError(
            f"workers.learners={cfg.workers.learners} data-parallel learners need at least one sequence each, but a "
            f"mini-batch holds {samples // cfg.algo.mini_batches}; lower workers.learners or algo.mini_batches"
        )

    for i, component in enumerate(cfg.reward.components):
        try:
            build_component(component.fn, component.params)
        except ValueError as err:
            raise ConfigError(f"reward.components[{i}] ({component.name}): {err}") from None
    component_names = [c.name for c in cfg.reward.components]
    for i, gate in enumerate(cfg.reward.gates):
        for key in ("part", "requires"):
            if getattr(gate, key) not in component_names:
                raise ConfigError(
                    f"reward.gates[{i}].{key}={getattr(gate, key)!r} is not a reward component; "
                    f"components: {', '.join(component_names)}"
                )

    tokenizer, model_config, directory = None, None, None
    if cfg.model.path is not None:
        try:
            directory, model_config, tokenizer = check_causal_lm_dir(cfg.model.path)
        except ModelLoadError as err:
            raise ConfigError(f"model.path: {err}") from None
        context = model_config.get("max_position_embeddings")
        context_key = f"the model's max_position_embeddings ({directory / 'config.json'})"
    else:
        context, context_key = cfg.model.max_positions, "model.max_positions"
    budget = max(cfg.rollout.max_new_tokens, cfg.eval.max_new_tokens or 0)
    if context is not None and budget >= context:
        raise ConfigError(
            f"rollout.max_new_tokens / eval.max_new_tokens = {budget} leaves no room for a prompt in "
            f"{context_key} = {context}; lower the token budget or use a longer-context model"
        )
    if cfg.model.path is None and cfg.model.preset not in PRESETS:
        raise ConfigError(f"model.preset: unknown preset {cfg.model.preset!r}; valid: {', '.join(PRESETS)}")
    check_lora(cfg, model_config if cfg.model.path is not None else None)
    check_jsonl_texts(cfg, tokenizer)

    for key in ("workers", "reward_workers"):
        if getattr(cfg.workers, key) > 0 and not ray_available():
            raise ConfigError(f"workers.{key}={getattr(cfg.workers, key)} runs workers on Ray, which is not installed: {INSTALL_HINT}")
    if cfg.workers.learner_placement == "ray" and cfg.workers.learners == 1:
        raise ConfigError("workers.learner_placement=ray places learner ranks 2..N on Ray, but workers.learners=1: set workers.learners to 2 or more, or leave learner_placement at auto")
    if cfg.workers.learners_on_ray and not ray_available():
        why = "workers.address is set" if cfg.workers.learner_placement == "auto" else "workers.learner_placement=ray"
        raise ConfigError(f"{why}: learner ranks run as Ray actors. {INSTALL_HINT}; or set workers.learner_placement=processes")
    check_engine(cfg, model_config if cfg.model.path is not None else None)
    if cfg.telemetry.wandb == "on" and not wandb_available():
        raise ConfigError("telemetry.wandb=on but the wandb package is not installed: `pip install wandb`, or use auto/off")
    if cfg.trainer.output_dir is not None and not resuming:
        out = Path(cfg.trainer.output_dir)
        check_output_dir(out, "trainer.output_dir")  # a file or an unwritable directory: before iterdir raises
        if out.exists() and any(out.iterdir()):
            raise ConfigError(
                f"trainer.output_dir={out} already holds files; choose a new directory, "
                f"or continue that run with `reinforge train --resume {out}`"
            )
    # Last, once the settings are known good; the tasks are not tokenized yet, so prompts count at their fewest tokens.
    check_memory_fit(cfg, directory, prompt_lower_bound(cfg, tokenizer), exact_prompts=False)


def check_engine(cfg: Config, model_config: dict | None) -> None:
    """engine.type=vllm: the extra is installed and vLLM serves the model (the async schedule, partial
    rollouts and Ray rollout workers run on vLLM: reinforge.engines.base, the protocol)."""
    if cfg.engine.type != "vllm":
        return
    from reinforge.engines import vllm_engine  # no vLLM import until a check needs it

    if not vllm_engine.vllm_available():
        raise ConfigError(f"engine.type=vllm: {vllm_engine.INSTALL_HINT}")
    if model_config is None:  # the tiny Llama built locally: what build_tiny_llama makes of the preset
        hidden, _, heads, _, _ = PRESETS[cfg.model.preset]
        model_config = {"architectures": ["LlamaForCausalLM"], "hidden_size": hidden, "num_attention_heads": heads}
    reason = vllm_engine.unsupported_model_reason(model_config)
    if reason is not None:
        where = "model.path" if cfg.model.path is not None else f"model.preset={cfg.model.preset}"
        raise ConfigError(f"engine.type=vllm cannot serve this model ({where}): {reason}; use engine.type=torch or another model")


def check_algorithm(cfg: Config) -> None:
    """Method names exist and fit together; each refusal says why the combination is wrong."""
    algo, critic = cfg.algo, cfg.critic
    try:
        get_policy_loss(algo.policy_loss)
    except ValueError as err:
        raise ConfigError(f"algo.policy_loss: {err}") from None
    if algo.loss_agg not in AGGREGATIONS:
        raise ConfigError(f"algo.loss_agg: unknown aggregation {algo.loss_agg!r}; valid: {', '.join(sorted(AGGREGATIONS))}")
    required = REQUIRED_AGGREGATION.get(algo.policy_loss)
    if required is not None and algo.loss_agg != required:
        raise ConfigError(
            f"algo.policy_loss={algo.policy_loss} is a sequence-level objective, defined only with "
            f"algo.loss_agg={required} (got {algo.loss_agg})"
        )
    estimator = get_estimator(algo.advantage)
    if estimator.needs_critic and not critic.enabled:
        raise ConfigError(f"algo.advantage={algo.advantage} needs a learned value function: set critic.enabled=true (or use algo.method=ppo)")
    if critic.enabled and not estimator.needs_critic:
        raise ConfigError(f"critic.enabled=true but algo.advantage={algo.advantage} does not use a critic; use gae or disable the critic")
    if critic.enabled:
        try:
            get_value_loss(critic.loss)
        except ValueError as err:
            raise ConfigError(f"critic.loss: {err}") from None
        if critic.support[0] >= critic.support[1]:
            raise ConfigError(f"critic.support must be (low, high) with low < high, got {critic.support}")
    if algo.advantage == "pass_at_k" and algo.pass_k > cfg.rollout.group_size:
        raise ConfigError(f"algo.pass_k={algo.pass_k} exceeds rollout.group_size={cfg.rollout.group_size}; pass@k needs k <= group size")
    if algo.kl_in_reward and algo.kl_coef == 0:
        raise ConfigError("algo.kl_in_reward=true has no effect with algo.kl_coef=0; set a KL coefficient")
    if algo.ref_reset_every and not (algo.kl_coef > 0 or algo.ace_alpha > 0):
        raise ConfigError("algo.ref_reset_every needs a reference model, which only algo.kl_coef > 0 or algo.ace_alpha > 0 loads")
    kl_in_loss = algo.kl_coef > 0 and not algo.kl_in_reward
    if algo.kl_bias_correction and not kl_in_loss:
        raise ConfigError(
            "algo.kl_bias_correction weighs the KL term of the loss by the importance ratio; it needs that term: "
            "set algo.kl_coef > 0 with algo.kl_in_reward=false, or drop algo.kl_bias_correction"
        )
    if algo.kl_ctrl == "adaptive":
        if algo.kl_coef == 0:
            raise ConfigError("algo.kl_ctrl=adaptive multiplies the KL coefficient from its start value: set algo.kl_coef > 0 (verl's default is 0.001)")
    if algo.ref_mixup_alpha < 1 and not algo.ref_reset_every:
        raise ConfigError(
            f"algo.ref_mixup_alpha={algo.ref_mixup_alpha} mixes the policy into the reference every algo.ref_reset_every steps "
            "(TRL's ref_model_sync_steps): set algo.ref_reset_every"
        )
    if algo.clip_cov_lb >= algo.clip_cov_ub:
        raise ConfigError(f"algo.clip_cov_lb ({algo.clip_cov_lb}) must be below algo.clip_cov_ub ({algo.clip_cov_ub}): they bound the covariance band clip_cov draws from")


def check_lora(cfg: Config, model_config: dict | None) -> None:
    """model.lora: peft installed, every target a linear layer of the model (read from its
    architecture on the meta device: no weights loaded), and no combination it cannot serve."""
    if cfg.model.lora is None:
        return
    if not lora.peft_available():
        raise ConfigError(f"model.lora is set but peft is not installed: {lora.INSTALL_HINT}, or set model.lora=null")
    if cfg.algo.ref_reset_every and cfg.algo.ref_mixup_alpha < 1:
        # A reset copies the adapters (reinforge.learner.reference); a mix of two adapters is no adapter of that rank.
        raise ConfigError(
            f"algo.ref_mixup_alpha={cfg.algo.ref_mixup_alpha} with model.lora: a LoRA policy's reference is its base plus a copy "
            "of the adapters, and alpha * B A + (1 - alpha) * B' A' is not an adapter of the same rank; use algo.ref_mixup_alpha=1.0 "
            "(the hard reset) or drop model.lora"
        )
    if model_config is not None:
        from transformers import AutoConfig

        skeleton = lora.architecture_skeleton(AutoConfig.from_pretrained(resolve_model_path(cfg.model.path), local_files_only=True))
        where = f"model.path {cfg.model.path}"
    else:
        skeleton = tiny_llama_skeleton(cfg.model.preset)
        where = f"the tiny Llama (model.preset={cfg.model.preset})"
    lora.check_target_modules(cfg.model.lora, skeleton, where)


def check_device(cfg: Config) -> None:
    """model.device=cuda needs a visible GPU (and one per data-parallel learner); checked before compute."""
    device = cfg.model.device
    if not device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"model.device={device} but torch sees no CUDA GPU (torch {torch.__version__}); use model.device=cpu")
    count = torch.cuda.device_count()
    index = int(device.split(":")[1]) if ":" in device else 0
    if index >= count:
        raise ConfigError(f"model.device={device} but torch sees {count} GPU(s) (cuda:0 to cuda:{count - 1})")
    if cfg.workers.learners > 1 and not cfg.workers.learners_on_ray and (index != 0 or cfg.workers.learners > count):
        raise ConfigError(
            f"workers.learners={cfg.workers.learners} with model.device={device}: learner rank r trains on cuda:r (NCCL), "
            f"so it needs model.device=cuda (or cuda:0) and {cfg.workers.learners} GPUs; torch sees {count}"
        )


def check_schedule(cfg: Config) -> None:
    """Async and partial rollouts train on tokens from older weights; what they need, and refuse."""
    t = cfg.trainer
    off_policy = (t.schedule == "async" and t.max_staleness > 0) or t.partial_rollouts
    if off_policy and cfg.algo.tis_cap is None:
        what = "trainer.partial_rollouts=true" if t.partial_rollouts else f"trainer.schedule=async with trainer.max_staleness={t.max_staleness}"
        raise ConfigError(
            f"{what} trains on tokens sampled by older weights: set algo.tis_cap (e.g. 2.0) for the decoupled-PPO "
            "importance correction against the behaviour log-probs"
        )
    if not t.partial_rollouts:
        return
    if t.max_staleness < 1:
        raise ConfigError("trainer.partial_rollouts=true resumes unfinished responses with the next weights, which needs trainer.max_staleness >= 1")
    if cfg.env.type == "gateway":  # an agent program runs its episodes itself (run_groups): nothing to pause
        raise ConfigError(
            "trainer.partial_rollouts=true pauses episodes the rollout loop drives turn by turn (env.type=single_turn, tool, "
            "text_game, game, or your own Env); env.type=gateway runs whole rollouts itself"
        )
    rows = math.ceil(t.overprovision * cfg.rollout.prompts_per_step) * cfg.rollout.group_size
    if rows > MAX_BATCH_SIZE:
        raise ConfigError(
            f"trainer.partial_rollouts=true samples all {rows} rows in flight (trainer.overprovision x rollout.prompts_per_step "
            f"x rollout.group_size) in one engine batch, at most {MAX_BATCH_SIZE}; lower one of them"
        )


def check_rollout_correction(algo) -> None:
    """The level and band keys of rollout correction (reinforge.algos.losses.rollout_correction)."""
    if algo.tis_level != "token" and algo.tis_cap is None:
        raise ConfigError(
            f"algo.tis_level={algo.tis_level} is the level of the algo.tis_cap weights, but algo.tis_cap is unset; "
            "set algo.tis_cap (e.g. 2.0) or leave algo.tis_level=token"
        )
    if algo.rollout_mask is None:
        if algo.rollout_mask_low is not None or algo.rollout_mask_high is not None:
            raise ConfigError(
                "algo.rollout_mask_low / algo.rollout_mask_high are the band of algo.rollout_mask, which is unset; "
                "set algo.rollout_mask=token|sequence|geometric, or remove them"
            )
        return
    high = algo.rollout_mask_high
    if high is None:
        raise ConfigError(
            f"algo.rollout_mask={algo.rollout_mask} needs algo.rollout_mask_high, the upper end of the band of kept "
            "ratios (>= 1; e.g. 2.0, or 1.001 for geometric)"
        )
    low = algo.rollout_mask_low if algo.rollout_mask_low is not None else 1.0 / high
    if not low <= 1.0 <= high:
        raise ConfigError(
            f"the band [algo.rollout_mask_low={low:g}, algo.rollout_mask_high={high:g}] must hold 1, the ratio of an exact "
            "engine: set rollout_mask_low <= 1 <= rollout_mask_high"
        )


def inexact_engine_reasons(cfg: Config) -> list[str]:
    """Why the rollout engine's log-probs will not match the learner's, from the config alone."""
    reasons = []
    if cfg.rollout.engine_dtype != "float32":
        reasons.append(f"rollout.engine_dtype={cfg.rollout.engine_dtype} samples with a bfloat16 copy of the float32 weights")
    if cfg.algo.bf16_autocast:
        reasons.append("algo.bf16_autocast=true computes the learner's log-probs in bfloat16")
    if cfg.engine.type == "vllm":
        reasons.append("engine.type=vllm samples with vLLM's own kernels (not the learner's forward)")
    if cfg.workers.workers > 0 and cfg.workers.address is not None:
        reasons.append(f"workers.address={cfg.workers.address} may run the rollout engines on other machines, whose kernels round differently")
    return reasons


def engine_gap_warnings(cfg: Config) -> list[str]:
    """Before compute: an inexact engine without the importance correction (algo.tis_cap)."""
    reasons = inexact_engine_reasons(cfg)
    if not reasons or cfg.algo.tis_cap is not None:
        return []
    return [
        f"the rollout engine is not exact ({'; '.join(reasons)}): its log-probs drift from the learner's, so the "
        "'on-policy' data is off-policy; the gap is logged every step (logprob_gap/*). Set algo.tis_cap "
        "(e.g. 2.0) to correct it with truncated importance weights"
    ]
