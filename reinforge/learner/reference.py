"""The frozen reference policy, for the KL penalty (and ACE).

Full fine-tuning keeps a frozen copy of the starting policy. A LoRA policy (reinforge.models.lora)
needs none: its base weights never change, so the reference is the policy itself with its adapters
disabled (`peft`'s `disable_adapter()` context) and no second copy of the weights is kept.
"""

from __future__ import annotations

import contextlib
import copy

import torch
from transformers import PreTrainedModel

from reinforge.learner import packed_forward
from reinforge.learner.batch import TrainingBatch
from reinforge.learner.chunked_logprobs import DEFAULT_CHUNK_TOKENS
from reinforge.learner.compiled_forward import compile_forward
from reinforge.learner.policy_learner import check_memory_settings, compute_logprobs
from reinforge.models.lora import is_lora_model


class ReferenceModel:
    def __init__(
        self, model: PreTrainedModel, micro_batch_size: int = 64, temperature: float = 1.0, compile_forward: bool = False,
        pack_sequences: bool = True,
        packed_kernels: str = "auto",
        logprob_chunk_tokens: int | None = DEFAULT_CHUNK_TOKENS,
        max_tokens_per_microbatch: int | None = None,
    ):
        """`compile_forward`: torch.compile the frozen copy's forward (reinforge.learner.compiled_forward).
        `pack_sequences`, `packed_kernels`, `logprob_chunk_tokens`, `max_tokens_per_microbatch`: as
        the policy learner's (reinforge.learner.policy_learner)."""
        check_memory_settings(logprob_chunk_tokens, max_tokens_per_microbatch)
        self.micro_batch_size = micro_batch_size
        self.logprob_chunk_tokens = logprob_chunk_tokens
        self.max_tokens_per_microbatch = max_tokens_per_microbatch
        self.compile_forward = compile_forward
        self.pack = pack_sequences and not compile_forward and packed_forward.supports(model)
        self.packed_kernels = packed_kernels
        packed_forward.native_kernels_wanted(packed_kernels)  # fails here, not at the first step
        self.temperature = temperature
        self.adapters_off = is_lora_model(model)  # the base of the policy's adapters, not a copy
        if self.adapters_off:
            self.model = model
        else:
            self.reset_to(model)

    def reset_to(self, model: PreTrainedModel) -> None:
        """Take a frozen copy of `model` as the new reference (ProRL's periodic reset)."""
        if self.adapters_off or is_lora_model(model):
            raise ValueError(
                "a LoRA policy's reference is its base with the adapters disabled; resetting it to the current "
                "policy would need a second copy of the weights (algo.ref_reset_every does not combine with model.lora)"
            )
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        if self.compile_forward:
            compile_forward(self.model)

    @torch.no_grad()
    def update_toward(self, model: PreTrainedModel, alpha: float) -> None:
        """ref <- alpha * model + (1 - alpha) * ref, parameter by parameter (TR-DPO's soft update, Gorbatovski
        et al. 2024, arXiv:2404.09656; TRL's SyncRefModelCallback); alpha = 1 is `reset_to` (ProRL's hard reset)."""
        if alpha >= 1.0:
            self.reset_to(model)
            return
        if self.adapters_off or is_lora_model(model):
            self.reset_to(model)  # raises the LoRA error: there is no copy to move
        for ref_param, param in zip(self.model.parameters(), model.parameters(), strict=True):
            ref_param.mul_(1.0 - alpha).add_(param.detach().to(ref_param.dtype), alpha=alpha)

    def logprobs(self, batch: TrainingBatch) -> torch.Tensor:
        with self.model.disable_adapter() if self.adapters_off else contextlib.nullcontext():
            return compute_logprobs(
                self.model, batch, self.micro_batch_size, self.temperature, pack=self.pack, packed_kernels=self.packed_kernels,
                chunk_tokens=self.logprob_chunk_tokens, max_tokens=self.max_tokens_per_microbatch,
            )

    def state_dict(self) -> dict[str, torch.Tensor] | None:
        """What a checkpoint keeps: the copy's weights, or None for the base of a LoRA policy
        (restored with the policy itself)."""
        return None if self.adapters_off else self.model.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor] | None) -> None:
        if not self.adapters_off:
            self.model.load_state_dict(state)
