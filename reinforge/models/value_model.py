"""The critic: a transformer trunk and a linear value head, aligned with TrainingBatch.

`forward(input_ids, attention_mask)` returns [N, S-1] values: index t is V(state after tokens
0..t), the value of the state in which token t+1 is sampled, so it lines up with `loss_mask[:, t]`
and with the advantages/returns of reinforge.algos. With `num_bins`, the head predicts a
histogram over `num_bins` evenly spaced bins covering `support` (HL-Gauss classification value,
Farebrother et al. 2024) and the value is its expectation over the bin centers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, PreTrainedModel, PreTrainedTokenizerBase

from reinforge.algos.losses.value import hl_gauss_bin_centers
from reinforge.models.tiny_llama import build_tiny_llama

HEAD_WEIGHTS = "value_head.safetensors"
HEAD_CONFIG = "value_head.json"


class ValueModel(nn.Module):
    def __init__(
        self, trunk: PreTrainedModel, num_bins: int | None = None, support: tuple[float, float] = (-1.0, 1.5)
    ):
        """`trunk`: a base model (no LM head) whose output has `last_hidden_state`, e.g. LlamaModel."""
        super().__init__()
        if num_bins is not None and num_bins < 2:
            raise ValueError(f"num_bins must be None (scalar value) or >= 2, got {num_bins}")
        self.trunk = trunk
        self.num_bins = num_bins
        self.support = (float(support[0]), float(support[1]))
        hidden = trunk.config.get_text_config().hidden_size
        param = next(trunk.parameters())
        self.head = nn.Linear(hidden, num_bins or 1, dtype=param.dtype, device=param.device)
        # Zero head: every initial value is 0 (scalar) or a uniform histogram (bins), so the first
        # advantages are not noise from a random projection of the trunk's features.
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        if num_bins is not None:
            centers = hl_gauss_bin_centers(*self.support, num_bins, dtype=torch.float32)
            self.register_buffer("bin_centers", centers, persistent=False)

    @property
    def base_model(self) -> PreTrainedModel:
        """The trunk, where a Hugging Face model keeps its transformer (`base_model`): FSDP finds the
        decoder layers to shard one by one through it (reinforge.distributed.fsdp.decoder_layers)."""
        return self.trunk

    @classmethod
    def from_policy(
        cls, policy_model: PreTrainedModel, num_bins: int | None = None, support: tuple[float, float] = (-1.0, 1.5)
    ) -> "ValueModel":
        """A critic that starts from the policy's own trunk (a deep copy: the two train apart)."""
        trunk = policy_model.base_model  # LlamaForCausalLM -> LlamaModel; a base model returns itself
        return cls(copy.deepcopy(trunk), num_bins=num_bins, support=support)

    @classmethod
    def from_config(
        cls,
        tokenizer: PreTrainedTokenizerBase,
        preset: str = "nano",
        num_bins: int | None = None,
        support: tuple[float, float] = (-1.0, 1.5),
        max_positions: int = 128,
        seed: int = 0,
    ) -> "ValueModel":
        """A critic with its own freshly initialised tiny Llama trunk (see build_tiny_llama)."""
        trunk = build_tiny_llama(tokenizer, preset, max_positions=max_positions, seed=seed).model
        return cls(trunk, num_bins=num_bins, support=support)

    def _head_outputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.trunk(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        # The last position has no next token to be sampled: drop it to align with loss_mask.
        return self.head(hidden[:, :-1].to(self.head.weight.dtype)).float()

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Histogram logits [N, S-1, num_bins] (bins only)."""
        if self.num_bins is None:
            raise ValueError("logits() needs a ValueModel built with num_bins; this one predicts scalar values")
        return self._head_outputs(input_ids, attention_mask)

    def values_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Expected value over the bin centers: [..., num_bins] -> [...]."""
        return (logits.float().softmax(-1) * self.bin_centers).sum(-1)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Values [N, S-1], float32."""
        out = self._head_outputs(input_ids, attention_mask)
        return out.squeeze(-1) if self.num_bins is None else self.values_from_logits(out)

    def save_pretrained(self, directory: str | Path) -> Path:
        """The trunk in Hugging Face format plus value_head.safetensors and value_head.json."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.trunk.save_pretrained(directory)
        save_file({k: v.detach().contiguous().cpu() for k, v in self.head.state_dict().items()}, directory / HEAD_WEIGHTS)
        config = {"num_bins": self.num_bins, "support": list(self.support)}
        (directory / HEAD_CONFIG).write_text(json.dumps(config, indent=2) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | Path, dtype: str | torch.dtype = "float32") -> "ValueModel":
        directory = Path(directory)
        if not (directory / HEAD_CONFIG).is_file():
            raise FileNotFoundError(f"{directory} has no {HEAD_CONFIG}; it was not written by ValueModel.save_pretrained")
        config = json.loads((directory / HEAD_CONFIG).read_text())
        trunk = AutoModel.from_pretrained(directory, local_files_only=True, dtype=dtype)
        model = cls(trunk, num_bins=config["num_bins"], support=tuple(config["support"]))
        model.head.load_state_dict(load_file(directory / HEAD_WEIGHTS))
        return model
