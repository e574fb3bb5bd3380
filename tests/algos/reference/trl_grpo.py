"""TRL 1.16's GRPOTrainer loss, run on given tensors: the installed trainer's own methods
(_compute_loss, get_high_entropy_mask, get_off_policy_mask) bound to a stand-in that holds only
the state they read, with the model forward replaced by the log-probs and entropies to test.
One process, one micro-batch per optimizer step (no gradient accumulation)."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import torch
from trl import GRPOTrainer


class _OneProcess:
    sync_gradients = True
    num_processes = 1

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def pad_across_processes(self, x, dim=0, pad_index=0):
        return x

    def reduce(self, x, reduction="sum"):
        return x


class TRLGRPOLoss:
    """`loss(logps, entropies, ...)`: TRL's loss for loss_type `bnpo` (a token mean) and PPO's clip."""

    _compute_loss = GRPOTrainer._compute_loss
    get_high_entropy_mask = GRPOTrainer.get_high_entropy_mask
    get_off_policy_mask = staticmethod(GRPOTrainer.get_off_policy_mask)
    get_gamma_weights = staticmethod(GRPOTrainer.get_gamma_weights)

    def __init__(
        self, top_entropy_quantile=1.0, off_policy_mask_threshold=None, entropy_coef=0.0, use_adaptive_entropy=False,
        entropy_target=0.2, entropy_coef_delta=0.005, entropy_coef_min=0.0, entropy_coef_max=1.0, epsilon=0.2,
    ):
        self.accelerator = _OneProcess()
        self.aux_loss_enabled = False
        self.top_entropy_quantile = top_entropy_quantile
        self.off_policy_mask_threshold = off_policy_mask_threshold
        self.importance_sampling_level = "token"
        self.beta = 0.0
        self.loss_type = "bnpo"
        self.epsilon_low = self.epsilon_high = epsilon
        self.args = SimpleNamespace(
            delta=None, use_bias_correction_kl=False, entropy_target=entropy_target, entropy_coef_delta=entropy_coef_delta,
            entropy_coef_min=entropy_coef_min, entropy_coef_max=entropy_coef_max,
        )
        self.use_vllm = False
        self.model = SimpleNamespace(training=True)
        self.current_gradient_accumulation_steps = 1
        self.entropy_coef = entropy_coef
        self.use_adaptive_entropy = use_adaptive_entropy
        self._entropy_bonus_enabled = entropy_coef != 0.0 or use_adaptive_entropy
        self._last_world_entropy = float("inf")
        self._entropy_window_stats = None
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._stub = None

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        return self._stub

    def loss(self, logps, entropies, mask, advantages, old_logps, sampling_logps=None) -> torch.Tensor:
        """One optimizer step's loss (the adaptive coefficient, if on, moves at its end, as in TRL)."""
        self._stub = (logps, entropies, None)
        n, t = mask.shape
        inputs = {
            "prompt_ids": torch.zeros(n, 1, dtype=torch.long), "prompt_mask": torch.ones(n, 1, dtype=torch.long),
            "completion_ids": torch.zeros(n, t, dtype=torch.long), "completion_mask": mask.long(),
            "advantages": advantages, "old_per_token_logps": old_logps,
        }
        if sampling_logps is not None:
            inputs["sampling_per_token_logps"] = sampling_logps
        return self._compute_loss(None, inputs)
