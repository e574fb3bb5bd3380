"""A frozen copy of the starting policy, for the KL penalty."""

from __future__ import annotations

import copy

import torch
from transformers import PreTrainedModel

from reinforge.learner.batch import TrainingBatch
from reinforge.learner.policy_learner import compute_logprobs


class ReferenceModel:
    def __init__(self, model: PreTrainedModel, micro_batch_size: int = 64, temperature: float = 1.0):
        self.reset_to(model)
        self.micro_batch_size = micro_batch_size
        self.temperature = temperature

    def reset_to(self, model: PreTrainedModel) -> None:
        """Take a frozen copy of `model` as the new reference (ProRL's periodic reset)."""
        self.model = copy.deepcopy(model).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    def logprobs(self, batch: TrainingBatch) -> torch.Tensor:
        return compute_logprobs(self.model, batch, self.micro_batch_size, self.temperature)
