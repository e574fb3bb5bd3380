"""The memory-fit check before compute: one RL step's predicted peak (reinforge.run.memory_fit)
against what this machine, or model.device's GPU, has free; printed in one line at the start of
a run, and a run that cannot fit is refused with the numbers and the settings that would make
it fit (each with the peak it would give). `trainer.memory_check=false` skips it.

Preflight runs it before the tasks are tokenized, with prompts at their fewest tokens
(`prompt_lower_bound`: the chat template around the system prompt and instruction), so the
peak it prints is a lower bound; `check_memory_fit` takes the longest prompt once it is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reinforge.config import Config, ConfigError
from reinforge.run.memory_fit import RUNTIME_BYTES, MemoryEstimate, gib, micro_batch, predict, step_sizes
from reinforge.run.model_shape import ModelShape, run_shapes


@dataclass(frozen=True)
class Available:
    bytes: int
    where: str


def available_memory(device: str) -> Available:
    """What the run can use: free memory on the GPU (model.device=cuda), or on this machine
    (MemAvailable, or the cgroup's limit when lower) plus what this process already holds (the
    runtime the prediction counts is resident by the time preflight runs)."""
    if device.startswith("cuda"):
        import torch

        index = int(device.split(":")[1]) if ":" in device else torch.cuda.current_device()
        free, total = torch.cuda.mem_get_info(index)
        return Available(free, f"free on cuda:{index} ({gib(total)} in all, torch.cuda.mem_get_info)")
    machine, where = machine_available()
    limit = cgroup_available()
    if limit is not None and limit < machine:
        machine, where = limit, "this container's memory limit less its use (cgroup)"
    own = min(resident_bytes(), RUNTIME_BYTES)
    return Available(machine + own, f"{where} {gib(machine)} + {gib(own)} this process holds already")


def machine_available() -> tuple[int, str]:
    try:
        import psutil

        return psutil.virtual_memory().available, "available on this machine"
    except ImportError:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "MemAvailable"
    raise ConfigError("cannot tell how much memory this machine has (no psutil, no /proc/meminfo): set trainer.memory_check=false")


def cgroup_available() -> int | None:
    """limit - (usage - inactive page cache) of this process's memory cgroup (v2, else v1), or None without a limit."""
    root = Path("/sys/fs/cgroup")
    for limit_file, usage_file, stat_file, inactive in (
        ("memory.max", "memory.current", "memory.stat", "inactive_file"),
        ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat", "total_inactive_file"),
    ):
        try:
            raw = (root / limit_file).read_text().strip()
            if raw == "max" or int(raw) >= 1 << 60:
                return None
            usage = int((root / usage_file).read_text())
            stats = dict(line.split() for line in (root / stat_file).read_text().splitlines() if len(line.split()) == 2)
            return int(raw) - max(0, usage - int(stats.get(inactive, 0)))
        except (OSError, ValueError):
            continue
    return None


def resident_bytes() -> int:
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except ImportError:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def prompt_lower_bound(cfg: Config, tokenizer) -> int:
    """The fewest tokens a prompt of this run can have, known before the tasks are tokenized: the
    chat template around the system prompt and instruction (an empty question), else 1."""
    from reinforge.run.task_fit import effective_prompt_format

    if tokenizer is None or effective_prompt_format(cfg, tokenizer) != "chat" or not getattr(tokenizer, "chat_template", None):
        return 1
    system, instruction = cfg.task.system_prompt, cfg.task.instruction
    question = (instruction or "").replace("{question}", "")
    messages = ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": question}]
    try:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    except Exception:  # a template that needs more than plain messages: no bound from it
        return 1
    return max(1, len(ids))


def with_setting(cfg: Config, key: str, value) -> Config | None:
    """A copy of `cfg` with `key` (section.name) set, or None when the schema refuses it."""
    section, name = key.split(".")
    copy = cfg.model_copy(deep=True)
    try:
        setattr(getattr(copy, section), name, value)
    except ValueError:  # pydantic's ValidationError: a value that key does not take
        return None
    return copy


def knob_variants(cfg: Config, shape: ModelShape, prompt_tokens: int, estimate: MemoryEstimate) -> list[tuple[str, Config]]:
    """The settings that lower the predicted peak, each as `key=value` and the config it makes."""
    a, r = cfg.algo, cfg.rollout
    sizes = step_sizes(cfg, prompt_tokens)
    variants: list[tuple[str, Config | None]] = []
    phase = estimate.peak_phase
    if phase in ("update", "no-grad forward", "critic update"):
        no_grad = phase == "no-grad forward" and a.logprob_max_tokens is not None  # its own budget is the knob
        key = "algo.logprob_max_tokens" if no_grad else "algo.max_tokens_per_microbatch"
        fewer = micro_batch(cfg, sizes, shape, no_grad=no_grad).rows // 2
        while fewer >= 1:  # the largest token budget that fits, down to one full-length row per micro-batch
            budget = fewer * sizes.row_tokens
            variants.append((f"{key}={budget}", with_setting(cfg, key, budget)))
            fewer //= 2
        if not a.activation_checkpointing:
            variants.append(("algo.activation_checkpointing=true", with_setting(cfg, "algo.activation_checkpointing", True)))
    if cfg.model.lora is None:
        from reinforge.config.schema import LoraConfig

        variants.append(("model.lora.r=8", with_setting(cfg, "model.lora", LoraConfig())))
    if r.engine_dtype == "float32" and shape.fused:
        variants.append(("rollout.engine_dtype=bfloat16", with_setting(cfg, "rollout.engine_dtype", "bfloat16")))
    if phase == "evaluation":
        if cfg.eval.samples > 1:
            variants.append((f"eval.samples={cfg.eval.samples // 2}", with_setting(cfg, "eval.samples", cfg.eval.samples // 2)))
        variants.append((f"task.eval_size={max(1, cfg.task.eval_size // 2)}", with_setting(cfg, "task.eval_size", max(1, cfg.task.eval_size // 2))))
    if r.prompts_per_step > 1:
        variants.append((f"rollout.prompts_per_step={r.prompts_per_step // 2}", with_setting(cfg, "rollout.prompts_per_step", r.prompts_per_step // 2)))
    if r.group_size > 2:
        variants.append((f"rollout.group_size={r.group_size // 2}", with_setting(cfg, "rollout.group_size", r.group_size // 2)))
    if r.max_new_tokens > 1:
        variants.append((f"rollout.max_new_tokens={r.max_new_tokens // 2}", with_setting(cfg, "rollout.max_new_tokens", r.max_new_tokens // 2)))
    return [(label, variant) for label, variant in variants if variant is not None]


def knob_advice(
    cfg: Config, shape: ModelShape, prompt_tokens: int, estimate: MemoryEstimate, available: int, critic=None, policies: int = 1
) -> str:
    """`key=value (-> X GiB)` for each knob; of the token budgets only the largest that fits (or the smallest)."""
    advice, budgets = [], []
    for label, variant in knob_variants(cfg, shape, prompt_tokens, estimate):
        peak = predict(variant, shape, prompt_tokens, critic, policies).peak
        entry = (label, peak)
        if label.startswith(("algo.max_tokens_per_microbatch=", "algo.logprob_max_tokens=")):
            budgets.append(entry)
        else:
            advice.append(entry)
    if budgets:
        fitting = [b for b in budgets if b[1] <= available]
        advice.insert(0, fitting[0] if fitting else budgets[-1])
    return "; ".join(f"{label} -> {gib(peak)}" + (" (fits)" if peak <= available else "") for label, peak in advice)


def check_memory_fit(
    cfg: Config, model_dir: Path | None, prompt_tokens: int, exact_prompts: bool = True, available: Available | None = None
) -> MemoryEstimate | None:
    """Predict one step's peak (`estimate_run`), log it in one line, and raise ConfigError when it
    exceeds what the machine (or model.device's GPU) has free. `exact_prompts` False: `prompt_tokens`
    is a lower bound (before the tasks are tokenized), so the peak is at least the one printed.
    trainer.memory_check=false skips it (returns None)."""
    if not cfg.trainer.memory_check:
        return None
    shape, critic, policies = run_shapes(cfg, model_dir)
    estimate = predict(cfg, shape, prompt_tokens, critic, policies)
    available = available or available_memory(cfg.model.device)
    where = "on " + cfg.model.device if cfg.model.device.startswith("cuda") else "of memory"
    prompts = f"prompts of {prompt_tokens} tokens" if exact_prompts else f"prompts of at least {prompt_tokens} tokens"
    at_least = "" if exact_prompts else "at least "
    peak = f"{at_least}{gib(estimate.peak)} {where}"
    print(f"memory: one RL step is predicted to take {peak} ({estimate.peak_phase}; {prompts}); {gib(available.bytes)} available")
    if estimate.peak <= available.bytes:
        return estimate
    source = f"{model_dir / 'config.json'}" if model_dir is not None else f"model.preset={cfg.model.preset}"
    raise ConfigError(
        f"this run needs {peak} at its peak, more than the {gib(available.bytes)} it can use "
        f"({available.where}). Predicted before loading the model, from {source} and the run's settings ({prompts}, "
        f"{cfg.rollout.prompts_per_step} x {cfg.rollout.group_size} rows): {estimate.describe()}. To fit, change one of: "
        f"{knob_advice(cfg, shape, prompt_tokens, estimate, available.bytes, critic, policies)}. "
        "Or set trainer.memory_check=false to start anyway"
    )
