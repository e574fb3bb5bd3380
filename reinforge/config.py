"""The config schema (validated before any compute), YAML recipes and dotted overrides.

One pydantic model per section; unknown keys are errors (`extra="forbid"`), so a typo in a
recipe or on the command line is reported with its dotted name before a model is loaded.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and the fix."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(Section):
    path: str | None = Field(None, description="Local Hugging Face model directory. None builds a tiny Llama locally.")
    preset: str = Field("micro", description="Size preset of the locally built tiny Llama (see reinforge.models.tiny_llama).")
    vocab_size: int = Field(384, gt=0, description="Vocabulary size of the tokenizer trained in-process.")
    max_positions: int = Field(128, gt=0, description="Context length of the locally built model.")


class TaskConfig(Section):
    source: str = Field("arithmetic", description="Task source: arithmetic | jsonl | reasoning_gym.")
    dataset: str | None = Field(None, description="reasoning-gym dataset name (source=reasoning_gym).")
    params: dict[str, Any] = Field(default_factory=dict, description="Source parameters (arithmetic knobs, reasoning-gym dataset config).")
    path: str | None = Field(None, description="JSONL file of training tasks (source=jsonl).")
    eval_path: str | None = Field(None, description="JSONL file of held-out tasks; default: split off the training file.")
    train_size: int = Field(20000, gt=0, description="Number of training tasks (generated sources).")
    eval_size: int = Field(500, gt=0, description="Number of held-out tasks.")


class SFTConfig(Section):
    steps: int = Field(1500, ge=0, description="Supervised warm-up steps before RL (0 skips the warm-up).")
    batch_size: int = Field(64, gt=0)
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(50, ge=0)
    weight_decay: float = Field(0.0, ge=0)


class RolloutConfig(Section):
    prompts_per_step: int = Field(32, gt=0, description="Distinct tasks sampled per RL step.")
    group_size: int = Field(8, gt=0, description="Completions sampled per task (the GRPO group).")
    max_new_tokens: int = Field(16, gt=0)
    temperature: float = Field(1.0, gt=0, description="Sampling temperature; log-probs are taken at this temperature.")
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0, description="0 disables top-k.")
    prompt_format: Literal["auto", "raw", "chat"] = Field(
        "auto", description="raw: prompt text as is; chat: tokenizer chat template; auto: chat when the tokenizer has one."
    )
    engine_dtype: Literal["float32", "bfloat16"] = Field("float32", description="Dtype of the sampling engine's weight copy.")


class AlgoConfig(Section):
    advantage: str = Field("grpo", description="Advantage estimator, by name (reinforge.algos.registry).")
    lr: float = Field(1e-4, gt=0, description="Policy learning rate (AdamW).")
    weight_decay: float = Field(0.0, ge=0)
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range epsilon.")
    kl_coef: float = Field(0.0, ge=0, description="Weight of the k3 KL penalty to a frozen reference; 0 loads no reference.")
    epochs: int = Field(1, gt=0, description="Passes over each rollout batch.")
    mini_batches: int = Field(1, gt=0, description="Optimizer steps per pass over a rollout batch.")
    micro_batch_size: int = Field(64, gt=0, description="Sequences per forward/backward (gradient accumulation).")
    max_grad_norm: float = Field(1.0, gt=0)
    bf16_autocast: bool = Field(False, description="bfloat16 autocast for the learner's forward/backward.")


class RewardComponent(Section):
    name: str
    fn: str = Field(description="Reward function name (reinforge.rewards.registry).")
    weight: float = 1.0
    params: dict[str, Any] = Field(default_factory=dict)


class RewardConfig(Section):
    components: list[RewardComponent] = Field(
        default_factory=lambda: [RewardComponent(name="correct", fn="verifier", weight=1.0)]
    )
    timeout_s: float = Field(10.0, gt=0, description="Per-call timeout of each reward function.")
    max_error_fraction: float = Field(
        0.5, ge=0, le=1, description="Stop the run when more than this fraction of a batch's reward calls fail."
    )


class EvalConfig(Section):
    every: int = Field(50, gt=0, description="Evaluate on held-out tasks every N RL steps (and at start and end).")
    samples: int = Field(4, gt=0, description="Sampled completions per task for mean@k.")
    max_new_tokens: int | None = Field(None, description="Default: rollout.max_new_tokens.")


class TrainerConfig(Section):
    steps: int = Field(200, ge=0, description="RL steps.")
    seed: int = 0
    output_dir: str | None = Field(None, description="Run directory; default runs/<timestamp>.")
    sample_every: int = Field(25, gt=0, description="Write sample trajectories every N steps.")
    threads: int | None = Field(None, description="torch intra-op threads; default: torch's choice.")


class TelemetryConfig(Section):
    progress: bool = Field(True, description="Live progress display (rich).")
    tensorboard: bool = Field(True, description="Also write TensorBoard event files.")


class Config(Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algo: AlgoConfig = Field(default_factory=AlgoConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)

    @field_validator("reward")
    @classmethod
    def _unique_reward_names(cls, reward: RewardConfig) -> RewardConfig:
        names = [c.name for c in reward.components]
        if len(set(names)) != len(names):
            raise ValueError(f"reward component names must be unique, got {names}")
        return reward


# --------------------------------------------------------------------------- loading

class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that reads `1e-5` and `1.0e5` as floats. PyYAML follows YAML 1.1, whose floats
    need a dot and a signed exponent, so it would keep them as strings: pydantic coerces those for
    typed fields, but free-form dicts (`task.params`, reward `params`) would receive '1e-5'."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - a SafeLoader subclass


def recipe_path(name_or_path: str) -> Path:
    """A recipe is a YAML path or the name of a recipe shipped in recipes/."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ConfigError(f"recipe file {path} does not exist")
        return path
    shipped = resources.files("reinforge.recipes")
    candidate = shipped / f"{name_or_path}.yaml"
    if not candidate.is_file():
        names = sorted(p.name.removesuffix(".yaml") for p in shipped.iterdir() if p.name.endswith(".yaml"))
        raise ConfigError(f"unknown recipe {name_or_path!r}; shipped recipes: {', '.join(names)} (or pass a YAML path)")
    return Path(str(candidate))


def apply_override(tree: dict[str, Any], dotted: str) -> None:
    """Apply one `a.b.c=value` override; the value is parsed as YAML (so 1e-5, true, [1,2] work)."""
    if "=" not in dotted:
        raise ConfigError(f"override {dotted!r} is not of the form key.sub=value")
    key, raw = dotted.split("=", 1)
    parts = key.strip().split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"override {key!r}: {part!r} is a value, not a section")
        node = child
    node[parts[-1]] = _load_yaml(raw) if raw.strip() else None


def _section_keys(loc: tuple) -> list[str]:
    """Field names of the section at `loc` (e.g. ("algo",)), for "did you mean" messages."""
    model: Any = Config
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None or not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return []
        model = field.annotation
    return list(model.model_fields)


def _format_validation_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            valid = ", ".join(_section_keys(e["loc"][:-1])) or "see docs/config.md"
            lines.append(f"  {key}: no such config key; valid keys here: {valid}")
        else:
            lines.append(f"  {key}: {e['msg']} (got {e.get('input')!r})")
    return "invalid config:\n" + "\n".join(lines)


def build_config(tree: dict[str, Any]) -> Config:
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err)) from None


def load_config(recipe: str | None = "default", overrides: list[str] | tuple[str, ...] = ()) -> Config:
    tree: dict[str, Any] = {}
    if recipe is not None:
        path = recipe_path(recipe)
        loaded = _load_yaml(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"recipe {path} must be a mapping of sections, got {type(loaded).__name__}")
        tree = loaded
    for item in overrides:
        apply_override(tree, item)
    return build_config(tree)


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
