"""Padding trajectories into the tensors the learner trains on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reinforge.rollout.trajectory import Trajectory


@dataclass
class TrainingBatch:
    """Right-padded tensors; every [N, T-1] tensor is aligned with the prediction of token t+1.

    `loss_mask[:, t]` is true when token t+1 was sampled by the policy, so the log-prob the model
    assigns at position t is the one to train and to compare with `old_logprobs[:, t]`.
    """

    input_ids: torch.Tensor  # [N, T]
    attention_mask: torch.Tensor  # [N, T]
    loss_mask: torch.Tensor  # [N, T-1] bool
    old_logprobs: torch.Tensor  # [N, T-1] behaviour log-probs (proximal ones after a TIS forward)
    advantages: torch.Tensor  # [N] or [N, T-1]
    ref_logprobs: torch.Tensor | None = None  # [N, T-1] frozen reference
    tis_weights: torch.Tensor | None = None  # [N, T-1] truncated importance weights
    old_values: torch.Tensor | None = None  # [N, T-1] critic values before the update
    returns: torch.Tensor | None = None  # [N, T-1] critic targets
    # [N, T-1] set instead of `tis_weights` when the proximal forward of decoupled PPO is folded
    # into the update (reinforge.trainer.advantage_step): the loss takes its own detached
    # log-probs as the proximal ones and weighs them against these.
    behaviour_logprobs: torch.Tensor | None = None
    # [N, T-1] the engine's log-probs when `old_logprobs` were replaced by the proximal ones (decoupled
    # PPO without the fold) and off-policy sequence masking needs them (algo.off_policy_mask_threshold).
    engine_logprobs: torch.Tensor | None = None
    # This step's KL coefficient when an adaptive controller sets it (algo.kl_ctrl): it travels with
    # the batch to every learner, data-parallel followers included. None: algo.kl_coef.
    kl_coef: float | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def select(self, rows: torch.Tensor | slice) -> "TrainingBatch":
        """A sub-batch, trimmed to its own longest sequence (right padding makes that a slice)."""
        width = int(self.attention_mask[rows].sum(1).max().item())

        def cut(t: torch.Tensor | None, w: int) -> torch.Tensor | None:
            return None if t is None else t[rows, :w] if t.dim() == 2 else t[rows]

        return TrainingBatch(
            input_ids=cut(self.input_ids, width),
            attention_mask=cut(self.attention_mask, width),
            loss_mask=cut(self.loss_mask, width - 1),
            old_logprobs=cut(self.old_logprobs, width - 1),
            advantages=cut(self.advantages, width - 1),
            ref_logprobs=cut(self.ref_logprobs, width - 1),
            tis_weights=cut(self.tis_weights, width - 1),
            old_values=cut(self.old_values, width - 1),
            returns=cut(self.returns, width - 1),
            behaviour_logprobs=cut(self.behaviour_logprobs, width - 1),
            engine_logprobs=cut(self.engine_logprobs, width - 1),
            kl_coef=self.kl_coef,
        )

    def to(self, device: torch.device) -> "TrainingBatch":
        """The same batch on `device` (the model's); itself when it is there already. Batches are
        built and scored on the CPU, and only the micro-batches a forward needs move to a GPU."""
        if self.input_ids.device == torch.device(device):
            return self
        moved = {name: t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t for name, t in vars(self).items()}
        return TrainingBatch(**moved)

    @property
    def num_loss_tokens(self) -> int:
        return int(self.loss_mask.sum().item())


def micro_batches(attention_mask: torch.Tensor, micro_batch_size: int, max_tokens: int | None = None) -> list[slice]:
    """Consecutive row ranges that each forward/backward takes: `micro_batch_size` rows at a time,
    or, with `max_tokens` (algo.max_tokens_per_microbatch), as many rows as fit the token budget.

    A micro-batch is trimmed to its longest row (TrainingBatch.select), so its cost is rows x
    that width, pads included (the packed forward computes no more than this): rows are added in
    order while (rows + 1) x max(width, next row's length) <= max_tokens. Rows keep their order, so
    a group's rows, which share a prompt, stay together for the packed forward. A row longer than
    the budget cannot be split: it goes alone. The loss is unaffected by how rows are split: each
    micro-batch's loss is its share of the whole mini-batch's (LossNormalizer counts the whole)."""
    n = attention_mask.shape[0]
    if max_tokens is None:
        return [slice(start, min(start + micro_batch_size, n)) for start in range(0, n, micro_batch_size)]
    if max_tokens <= 0:
        raise ValueError(f"max_tokens_per_microbatch must be positive, got {max_tokens}")
    lengths = attention_mask.sum(1).tolist()
    slices, start, width = [], 0, 0
    for row, length in enumerate(lengths):
        wider = max(width, int(length))
        if row > start and (row - start + 1) * wider > max_tokens:
            slices.append(slice(start, row))
            start, wider = row, int(length)
        width = wider
    if n > start:
        slices.append(slice(start, n))
    return slices


def collate(trajectories: list[Trajectory], advantages: torch.Tensor | None, pad_token_id: int) -> TrainingBatch:
    """Pad `trajectories`; `advantages` may be filled in later (None gives zeros)."""
    width = max(len(t.token_ids) for t in trajectories)
    n = len(trajectories)
    input_ids = torch.full((n, width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((n, width), dtype=torch.long)
    loss_mask = torch.zeros((n, width), dtype=torch.bool)
    old_logprobs = torch.zeros((n, width))
    for row, t in enumerate(trajectories):
        length = len(t.token_ids)
        input_ids[row, :length] = torch.tensor(t.token_ids)
        attention_mask[row, :length] = 1
        loss_mask[row, :length] = torch.tensor(t.loss_mask)
        old_logprobs[row, :length] = torch.tensor(t.behaviour_logprobs)
    return TrainingBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask[:, 1:],
        old_logprobs=old_logprobs[:, 1:],
        advantages=advantages.float() if advantages is not None else torch.zeros(n),
    )
