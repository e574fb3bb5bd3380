"""LoRA adapters on the policy, with `peft` (optional extra: `pip install reinforge[lora]`).

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685)
freezes every weight W of the model and trains, for each targeted linear layer, two small matrices
A (r x in) and B (out x r, zero at the start) so that the layer computes

    y = x (W + s * B @ A)^T,  s = alpha / r.

What the rest of reinforge sees:
- the learner trains a `peft.PeftModel`; its optimizer holds the adapters only (the frozen W have
  `requires_grad=False`, see `trainable_parameters`);
- the reference model is the same model with the adapters disabled (`peft`'s `disable_adapter()`),
  i.e. the frozen base: no second copy of the weights (reinforge.learner.reference); reset to the
  current policy (algo.ref_reset_every), it keeps a frozen copy of the adapter tensors only
  (`adapter_tensors`, a few MB) and runs its forward with them swapped in (`adapters_swapped`);
- engines sample from merged weights W + s * B @ A in a plain model of the base architecture
  (`merged_state_dict`, computed without touching the trained adapter, and `inference_copy`);
- checkpoints save the adapter only, with the base's SHA-256 so a resume on another base is refused;
  `final/` holds the merged model (plain `transformers` opens it) and the adapter in `final/adapter`.

Only `peft` is imported lazily: `is_lora_model` looks peft up in `sys.modules`, since a model can
only be a `PeftModel` once peft has been imported, so code paths without LoRA never pay its import.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.util
import sys
import warnings
from pathlib import Path

import torch
from transformers import PreTrainedModel

from reinforge.config import ConfigError, LoraConfig

INSTALL_HINT = "pip install 'reinforge[lora]' (the peft package)"
ADAPTER_DIR = "adapter"  # final/adapter: peft's adapter_config.json + adapter_model.safetensors
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def peft_available() -> bool:
    return importlib.util.find_spec("peft") is not None


def is_lora_model(model) -> bool:
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def linear_layer_names(model: torch.nn.Module) -> list[str]:
    """The distinct last names of the model's linear layers (q_proj, ..., lm_head): what
    `model.lora.target_modules` can name. A tied output layer (lm_head sharing the embedding) is left
    out: merging an adapter into it would change the embedding as well."""
    tied = bool(getattr(getattr(model, "config", None), "tie_word_embeddings", False))
    names = set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            last = name.rsplit(".", 1)[-1]
            if not (tied and last == "lm_head"):
                names.add(last)
    return sorted(names)


def check_target_modules(lora: LoraConfig, model: torch.nn.Module, where: str = "the model") -> None:
    """A ConfigError for every target that names no linear layer of `model`, listing the ones it has."""
    layers = linear_layer_names(model)
    unknown = [name for name in lora.target_modules if name not in layers]
    if unknown:
        raise ConfigError(
            f"model.lora.target_modules: {', '.join(map(repr, unknown))}: no linear layer of {where} has this name; "
            f"its linear layers are: {', '.join(layers)}"
        )


def architecture_skeleton(model_config) -> torch.nn.Module:
    """The model of `model_config` on the meta device: its module names, no memory and no compute."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(model_config)


def apply_lora(model: PreTrainedModel, lora: LoraConfig, seed: int = 0):
    """`model` wrapped with fresh adapters (B = 0, so the policy is unchanged at the start).

    A's random init is drawn from its own generator seeded by `seed`, leaving the global RNG stream
    as it was: the run samples and shuffles the same with or without the adapters' init.
    """
    if not peft_available():
        raise ConfigError(f"model.lora needs the peft package: {INSTALL_HINT}")
    import peft

    check_target_modules(lora, model)
    config = peft.LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, target_modules=list(lora.target_modules), lora_dropout=lora.dropout,
        bias="none", task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        # peft asks transformers' deprecated `is_gradient_checkpointing`: noise for the user, not theirs to fix
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        torch.manual_seed(seed)
        return peft.get_peft_model(model, config)


def adapter_tensors(model) -> dict[str, torch.Tensor]:
    """A detached copy of a LoRA model's adapter tensors (A and B of every adapted layer): the
    policy of this moment, given its frozen base, for a few MB instead of a copy of the model."""
    return {name: p.detach().clone() for name, p in model.named_parameters() if ".lora_" in name}


@contextlib.contextmanager
def adapters_swapped(model, tensors: dict[str, torch.Tensor]):
    """`model` computing with `tensors` (from `adapter_tensors`) in place of its own adapters; its
    own are put back bit for bit on exit. In place, so that every forward path (packed, chunked)
    runs unchanged; the caller holds the model for the duration (no optimizer step, no weight sync)."""
    params = dict(model.named_parameters())
    unknown = sorted(set(tensors) - set(params))
    if unknown or len(tensors) != sum(".lora_" in name for name in params):
        raise ValueError(f"the adapter copy does not match the model's adapters (unknown: {unknown[:3]}): was it taken from this model?")
    live = {name: params[name].detach().clone() for name in tensors}
    try:
        with torch.no_grad():
            for name, t in tensors.items():
                params[name].copy_(t)
        yield model
    finally:
        with torch.no_grad():
            for name, t in live.items():
                params[name].copy_(t)


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """What an optimizer of `model` holds: every parameter, or only the adapters under LoRA."""
    return [p for p in model.parameters() if p.requires_grad]


@torch.no_grad()
def merged_state_dict(model) -> dict[str, torch.Tensor]:
    """The state dict of a plain model of the base architecture holding W + s * B @ A.

    For every layer with an adapter the merged weight is computed afresh (peft's
    `get_delta_weight`); the adapter and the base weights are read, never written, so training
    continues on exactly the same adapter. Other tensors are the base's own (not copies).
    For a model without adapters this is simply its state dict.
    """
    if not is_lora_model(model):
        return model.state_dict()
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    state = {}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name:
            continue
        state[name.replace(".base_layer.", ".")] = tensor
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer) and not module.merged:
            key = f"{name}.weight"
            delta = sum(module.get_delta_weight(adapter) for adapter in module.active_adapters if adapter in module.lora_A)
            state[key] = state[key] + delta.to(state[key].dtype)
    return state


def inference_copy(model) -> PreTrainedModel:
    """A plain model (no peft layers, no gradients) holding `model`'s merged weights: an engine's own copy."""
    plain = copy.deepcopy(model).unload() if is_lora_model(model) else copy.deepcopy(model)
    plain.load_state_dict(merged_state_dict(model))
    for p in plain.parameters():
        p.grad = None
        p.requires_grad_(False)
    return plain.eval()


def base_weights_digest(model) -> str:
    """SHA-256 over the frozen base weights (names, dtypes, shapes, bytes) of a LoRA model: a
    checkpoint records it, so an adapter is never resumed on another base."""
    sha = hashlib.sha256()
    for name, tensor in model.get_base_model().state_dict().items():
        if ".lora_" in name:
            continue
        t = tensor.detach().cpu().contiguous()
        sha.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        sha.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return sha.hexdigest()


def load_adapter(model, directory: Path) -> None:
    """Put the adapter weights saved by `model.save_pretrained(directory)` back into `model`, exactly."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(directory) / ADAPTER_WEIGHTS
    if not path.is_file():
        raise ConfigError(f"{path} is missing: the checkpoint holds no LoRA adapter (was the run trained with model.lora?)")
    result = set_peft_model_state_dict(model, load_file(path))
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ConfigError(f"{path}: adapter tensors that this model.lora config has no place for: {unexpected[:5]}")


def save_merged_and_adapter(model, tokenizer, directory: Path) -> Path:
    """`directory`: the merged model with its tokenizer (plain `from_pretrained` opens it), and the
    adapter alone in `directory/adapter` (a sub-directory: transformers reads an adapter_config.json
    beside config.json as an adapter to load, not as a model)."""
    directory.mkdir(parents=True, exist_ok=True)
    inference_copy(model).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    model.save_pretrained(directory / ADAPTER_DIR)
    return directory
