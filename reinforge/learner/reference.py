"""The frozen reference policy, for the KL penalty (and ACE).

Full fine-tuning keeps a frozen copy of the starting policy. A LoRA policy (reinforge.models.lora)
needs none: its base weights never change, so the reference is the policy itself with its adapters
disabled (`peft`'s `disable_adapter()` context) and no second copy of the weights is kept. Reset to
the current policy (ProRL's periodic reset, algo.ref_reset_every), a LoRA reference becomes the
base plus a frozen copy of the adapters as they are then: only the adapter tensors are copied (a
few MB), and its forward runs the policy's model with them swapped in.

A soft update (algo.ref_mixup_alpha < 1) has no LoRA form: alpha * B A + (1 - alpha) * B' A' is
not an adapter of the same rank (mixing A and B separately computes another product), so it is
refused for a LoRA policy.
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
from reinforge.models.lora import adapter_tensors, adapters_swapped, is_lora_model


class ReferenceModel:
    def __init__(
        self, model: PreTrainedModel, micro_batch_size: int = 64, temperature: float = 1.0, compile_forward: bool = False,
        pack_sequences: bool = True,
        packed_kernels: str = "auto",
        logprob_chunk_tokens: int | None = DEFAULT_CHUNK_TOKENS,
        max_tokens_per_microbatch: int | None = None,
        logprob_max_tokens: int | None = None,
    ):
        """`compile_forward`: torch.compile the frozen copy's forward (reinforge.learner.compiled_forward).
        `pack_sequences`, `packed_kernels`, `logprob_chunk_tokens`, `max_tokens_per_microbatch`,
        `logprob_max_tokens`: as the policy learner's (reinforge.learner.policy_learner); its passes
        have no gradients, so `logprob_max_tokens` (when set) is their budget."""
        check_memory_settings(logprob_chunk_tokens, max_tokens_per_microbatch, logprob_max_tokens)
        self.micro_batch_size = micro_batch_size
        self.logprob_chunk_tokens = logprob_chunk_tokens
        self.max_tokens_per_microbatch = logprob_max_tokens or max_tokens_per_microbatch
        self.compile_forward = compile_forward
        self.pack = pack_sequences and not compile_forward and packed_forward.supports(model)
        self.packed_kernels = packed_kernels
        packed_forward.native_kernels_wanted(packed_kernels)  # fails here, not at the first step
        self.temperature = temperature
        self.lora = is_lora_model(model)  # the policy's own model: its base, or base + `self.adapter`
        self.adapter: dict[str, torch.Tensor] | None = None  # None: the base (adapters disabled)
        if self.lora:
            self.model = model
        else:
            self.reset_to(model)

    def reset_to(self, model: PreTrainedModel) -> None:
        """Take a frozen copy of `model` as the new reference (ProRL's periodic reset); of a LoRA
        policy (the model this reference serves), a copy of its adapters only."""
        if self.lora != is_lora_model(model):
            raise ValueError("a reference is reset to the policy it serves: both LoRA, or neither")
        if self.lora:
            self.adapter = adapter_tensors(model)  # adapters_swapped checks they fit self.model at the forward
            return
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
        if self.lora:
            raise ValueError(
                f"a soft reference update (alpha={alpha}) has no LoRA form: mixing two adapters is not an adapter of "
                "the same rank; use algo.ref_mixup_alpha=1.0 (the hard reset) with model.lora"
            )
        for ref_param, param in zip(self.model.parameters(), model.parameters(), strict=True):
            ref_param.mul_(1.0 - alpha).add_(param.detach().to(ref_param.dtype), alpha=alpha)

    def _weights(self):
        """The reference's weights for the duration of a forward."""
        if not self.lora:
            return contextlib.nullcontext()
        return self.model.disable_adapter() if self.adapter is None else adapters_swapped(self.model, self.adapter)

    def logprobs(self, batch: TrainingBatch) -> torch.Tensor:
        with self._weights():
            return compute_logprobs(
                self.model, batch, self.micro_batch_size, self.temperature, pack=self.pack, packed_kernels=self.packed_kernels,
                chunk_tokens=self.logprob_chunk_tokens, max_tokens=self.max_tokens_per_microbatch,
            )

    def state_dict(self) -> dict[str, torch.Tensor] | None:
        """What a checkpoint keeps: the copy's weights; of a LoRA policy's reference, the adapter
        copy of its last reset, or None for the base (restored with the policy itself)."""
        if self.lora:
            return None if self.adapter is None else {"adapter": dict(self.adapter)}
        return self.model.state_dict()

    def load_state_dict(self, state: dict | None) -> None:
        if not self.lora:
            self.model.load_state_dict(state)
            return
        if state is not None and set(state) != {"adapter"}:
            raise ValueError("this checkpoint's reference is a full model copy, but the policy is LoRA: resume with the run's own model.lora")
        if state is not None:
            params = dict(self.model.named_parameters())
            self.adapter = {name: t.to(device=params[name].device, dtype=params[name].dtype) for name, t in state["adapter"].items() if name in params}
            if len(self.adapter) != len(state["adapter"]):
                raise ValueError("the checkpoint's reference adapter does not match this model's adapters (another model.lora config?)")
        else:
            self.adapter = None
