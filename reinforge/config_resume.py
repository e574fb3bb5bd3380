"""The config of a resumed run: the saved config.yaml with the user's overrides, checked against
what the checkpoint restores (which changes would break exactness, which could not take effect)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from reinforge.config import Config, ConfigError, load_config

# Keys a resumed run may change without changing its weights or its metrics.
RESUME_SAFE_KEYS = {
    "telemetry.progress", "telemetry.tensorboard", "trainer.steps", "trainer.threads", "trainer.cpus",
    "trainer.retain_freed_memory",
    "trainer.checkpoint_every", "trainer.keep_checkpoints", "workers.address", "workers.timeout_s",
    "workers.startup_timeout_s",
}

# What a resumed run takes from its checkpoint instead of its config: a new value of these keys
# (a section name covers all its keys) could not take effect, so it is refused even with --force,
# with the reason. Every other changed key takes effect, algo.lr and critic.lr included (the
# learners re-apply the configured hyperparameters over the optimizer state they restore).
RESTORED_FROM_CHECKPOINT = {
    "model": "the policy's weights and tokenizer are restored from the checkpoint",
    "sft": "the supervised warm-up ran before the first checkpoint and does not run again",
    "task": "the task sampler's cursor and the reward cache, restored from the checkpoint, index the original tasks",
    "trainer.seed": "the task sampler, the mini-batch shuffle and the RNG states restored from the checkpoint continue the original seed's streams",
}
CRITIC_STRUCTURE_KEYS = ("critic.trunk", "critic.preset", "critic.loss", "critic.num_bins", "critic.support")
ASYNC_SCHEDULE_KEYS = ("trainer.schedule", "trainer.max_staleness", "trainer.partial_rollouts", "trainer.overprovision")


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def _restored_reason(key: str, saved: Config, cfg: Config) -> str | None:
    """Why a resumed run could not honour a new value of `key`, or None when it can."""
    if key == "model.device":  # the restored weights load on any device (other bits: --force)
        return None
    for prefix, reason in RESTORED_FROM_CHECKPOINT.items():
        if key == prefix or key.startswith(prefix + "."):
            return reason
    if key in CRITIC_STRUCTURE_KEYS and saved.critic.enabled and cfg.critic.enabled:
        return "the value model's weights are restored from the checkpoint"
    if key == "critic.enabled" and cfg.critic.enabled:
        return "the checkpoint holds no value model to continue"
    if key in ASYNC_SCHEDULE_KEYS and saved.trainer.schedule == "async":
        return "the batches (and partial rollouts) sampled ahead under the original schedule are restored from the checkpoint and would be dropped or misread"
    had_reference = saved.algo.kl_coef > 0 or saved.algo.ace_alpha > 0
    needs_reference = cfg.algo.kl_coef > 0 or cfg.algo.ace_alpha > 0
    if key in ("algo.kl_coef", "algo.ace_alpha") and needs_reference and not had_reference:
        return "the checkpoint holds no reference model (the run had algo.kl_coef=0 and algo.ace_alpha=0)"
    return None


def resume_config(
    run_dir: str, overrides: list[str] | tuple[str, ...] = (), force: bool = False, checkpoint: str | None = None
) -> Config:
    """The saved config of `run_dir` with `overrides`, its output directory set to `run_dir`.

    The run continues in the directory named, wherever it was first written (a copy, a moved run).
    Changes that would make the resumed run differ from the uninterrupted one are refused unless
    `force`, with the keys listed; changes the checkpoint would silently undo (RESTORED_FROM_CHECKPOINT)
    are refused even with `force`, with the reason, when there is a checkpoint to resume from
    (`checkpoint`, or one in `run_dir`; without one the run starts over and every key applies).
    """
    run_path = Path(run_dir)
    saved_path = run_path / "config.yaml"
    if not saved_path.is_file():
        raise ConfigError(f"--resume {run_dir}: no config.yaml there; it is not a reinforge run directory")
    if any(o.split("=", 1)[0].strip() == "trainer.output_dir" for o in overrides):
        raise ConfigError(
            f"trainer.output_dir cannot change on resume: the run continues in the directory --resume names ({run_dir}); "
            "to continue it elsewhere, copy the run directory there and resume the copy"
        )
    saved = load_config(str(saved_path))
    cfg = load_config(str(saved_path), overrides)
    saved.trainer.output_dir = cfg.trainer.output_dir = str(run_path)
    before, after = _flatten(saved.model_dump(mode="json")), _flatten(cfg.model_dump(mode="json"))
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k) and k not in RESUME_SAFE_KEYS)

    def listing(keys: list[str]) -> str:
        return ", ".join(f"{k}: {before.get(k)!r} -> {after.get(k)!r}" for k in keys)

    checkpoints = sorted(p for p in (run_path / "checkpoints").glob("step_*") if p.is_dir())
    resumed_from = Path(checkpoint) if checkpoint is not None else (checkpoints[-1] if checkpoints else None)
    reasons = {k: r for k in changed if resumed_from is not None and (r := _restored_reason(k, saved, cfg)) is not None}
    if reasons:
        lines = "\n".join(f"  {k}: {before.get(k)!r} -> {after.get(k)!r}: {r}" for k, r in reasons.items())
        raise ConfigError(
            f"resuming {run_dir} cannot apply these changes, not even with --force:\n{lines}\n"
            + (
                f"to train with them, start a new run from the checkpoint's weights: `reinforge train --model {resumed_from / 'model'} ...`"
                if saved.model.lora is None else
                f"to train with them, start a new run from a merged model: a LoRA checkpoint ({resumed_from / 'model'}) holds the "
                "adapter only, on the run's base (warm_start/); a finished run's final/ holds the merged model"
            )
        )
    if changed and not force:
        raise ConfigError(
            f"resuming {run_dir} with a changed config would not reproduce the original run ({listing(changed)}); "
            "pass --force to resume anyway"
        )
    if changed:
        ahead = (
            f" (the batches sampled ahead before the checkpoint, up to trainer.max_staleness={saved.trainer.max_staleness}, "
            "keep the values they were sampled and scored with)" if saved.trainer.schedule == "async" else ""
        )
        print(f"reinforge: --force: resuming {run_dir} with {listing(changed)}{ahead}", file=sys.stderr)
    return cfg
