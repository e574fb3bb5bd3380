"""A model's shape for the memory-fit prediction (reinforge.run.memory_fit), read from its config
alone: counts from the architecture built on the meta device (no weights), so tied embeddings,
biases and any layout are counted exactly; or the tiny Llama a run would build."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reinforge.config import Config
from reinforge.engines.llama_decoder import SUPPORTED_MODEL_TYPES


@dataclass(frozen=True)
class ModelShape:
    """What the prediction needs from a model's config: counts read from its architecture on the
    meta device (no weights), so tied embeddings, biases and any layout are counted exactly."""

    params: int
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    largest_param: int  # elements of the largest weight (AdamW's CPU temporaries are one at a time)
    fused: bool  # TorchEngine's fused decoder and the packed forward run it (Llama family, SiLU, full attention)
    linears: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # last name -> [(in, out)], for LoRA
    config: Any = None  # the transformers config (kv_cache_bytes reads it)

    def lora_params(self, lora) -> int:
        """Adapter weights of model.lora: r x (in + out) per targeted linear layer."""
        return sum(lora.r * (i + o) for name in lora.target_modules for i, o in self.linears.get(name, []))

    def lora_targeted(self, lora) -> int:
        """Weights of the targeted layers (merged afresh at every engine sync)."""
        return sum(i * o for name in lora.target_modules for i, o in self.linears.get(name, []))


def model_shape(model_config) -> ModelShape:
    """The shape of a transformers config (AutoConfig / LlamaConfig), from its meta-device skeleton."""
    import torch

    from reinforge.models.lora import architecture_skeleton

    skeleton = architecture_skeleton(model_config)
    seen, params, largest = set(), 0, 0
    for p in skeleton.parameters():  # parameters() yields a tied weight once
        if id(p) not in seen:
            seen.add(id(p))
            params += p.numel()
            largest = max(largest, p.numel())
    tied = bool(getattr(model_config, "tie_word_embeddings", False))
    linears: dict[str, list[tuple[int, int]]] = {}
    for name, module in skeleton.named_modules():
        last = name.rsplit(".", 1)[-1]
        if isinstance(module, torch.nn.Linear) and not (tied and last == "lm_head"):
            linears.setdefault(last, []).append((module.in_features, module.out_features))
    c = model_config
    hidden = first_attr(c, "hidden_size", "n_embd", "d_model")
    heads = first_attr(c, "num_attention_heads", "n_head")
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or hidden // heads
    intermediate = getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None) or 4 * hidden
    fused = (
        getattr(c, "model_type", None) in SUPPORTED_MODEL_TYPES
        and getattr(c, "hidden_act", "silu") == "silu"
        and not getattr(c, "use_sliding_window", False)
        and getattr(c, "sliding_window", None) is None
    )
    return ModelShape(
        params=params, vocab=first_attr(c, "vocab_size"), hidden=hidden, layers=first_attr(c, "num_hidden_layers", "n_layer"),
        heads=heads, kv_heads=kv_heads, head_dim=head_dim, intermediate=intermediate, largest_param=largest, fused=fused,
        linears=linears, config=c,
    )


def first_attr(config, *names: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return int(value)
    raise ConfigError(f"the model's config has none of {', '.join(names)}: reinforge cannot predict its memory (set trainer.memory_check=false)")


def config_shape(cfg: Config, model_dir: Path | None) -> ModelShape:
    """The policy's shape: its config.json (model.path), or the tiny Llama the run would build."""
    if model_dir is not None:
        from transformers import AutoConfig

        return model_shape(AutoConfig.from_pretrained(model_dir, local_files_only=True))
    return tiny_shape(cfg.model.preset, cfg.model.vocab_size, cfg.model.max_positions)


def tiny_shape(preset: str, vocab: int, max_positions: int) -> ModelShape:
    from transformers import LlamaConfig

    from reinforge.models.tiny_llama import PRESETS

    hidden, layers, heads, kv_heads, mlp = PRESETS[preset]
    return model_shape(
        LlamaConfig(
            vocab_size=vocab, hidden_size=hidden, intermediate_size=mlp, num_hidden_layers=layers, num_attention_heads=heads,
            num_key_value_heads=kv_heads, max_position_embeddings=max_positions, tie_word_embeddings=True,
        )
    )


def run_shapes(cfg: Config, model_dir: Path | None) -> tuple[ModelShape, ModelShape | None, int]:
    """The policy's shape, a separate critic trunk's (None: none, or a copy of the policy), and the
    number of trainable policies (several for a game's multi-policy run)."""
    shape = config_shape(cfg, model_dir)
    critic = None
    if cfg.critic.enabled and cfg.critic.trunk == "separate":
        critic = tiny_shape(cfg.critic.preset, shape.vocab, cfg.model.max_positions)
    return shape, critic, len(cfg.policies)
