"""Statistics the estimators share: per-group moments, batch standardization, token-level sums.

Everything is computed in float64 and the estimators return float32 (the learner's dtype): summing
a group's float32 rewards can leave a ~1e-8 residue that a division by (std + eps) would amplify.

Zero-variance groups. A group whose rewards are all equal carries no learning signal for a
group-relative estimator. `GroupStats.constant` detects it exactly (max == min, not std == 0, which
float rounding can miss), every group-normalized estimator gives such a group exactly 0 advantage
(reinforce_pp_baseline, which whitens over the batch's tokens as its reference does, says what it
gives instead), and reports the fraction of such groups as `zero_variance_group_frac`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

OUTPUT_DTYPE = torch.float32


def check_sample_tensors(rewards: torch.Tensor, group_ids: torch.Tensor) -> None:
    if rewards.dim() != 1 or rewards.shape != group_ids.shape:
        raise ValueError(
            f"rewards and group_ids must be 1-D of one shape, got {tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        )
    if not torch.isfinite(rewards).all():
        raise ValueError(f"rewards must be finite, got {rewards.tolist()}")


@dataclass(frozen=True)
class GroupStats:
    index: torch.Tensor  # [N] long: the group (0..G-1) of each sample
    counts: torch.Tensor  # [G] float64
    means: torch.Tensor  # [G] float64
    stds: torch.Tensor  # [G] float64, unbiased (n - 1); 0 for a constant group
    constant: torch.Tensor  # [G] bool: every value in the group is equal

    @property
    def zero_variance_frac(self) -> float:
        return self.constant.double().mean().item()


def group_stats(
    values: torch.Tensor, group_ids: torch.Tensor, *, min_group_size: int = 1, estimator: str = "this estimator"
) -> GroupStats:
    """Per-group count, mean, unbiased std and constancy of `values` [N] under `group_ids` [N].

    Group ids may be any integers in any order (groups need not be contiguous).
    """
    check_sample_tensors(values, group_ids)
    _, index, counts = torch.unique(group_ids, return_inverse=True, return_counts=True)
    if (counts < min_group_size).any():
        raise ValueError(
            f"{estimator} needs at least {min_group_size} samples per group; the smallest group has {counts.min().item()}"
        )
    values = values.double()
    num_groups = counts.numel()
    n = counts.double()
    means = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, values) / n
    centered = values - means[index]
    variances = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, centered**2) / (n - 1).clamp(min=1)
    highest = torch.zeros(num_groups, dtype=torch.float64).scatter_reduce(0, index, values, "amax", include_self=False)
    lowest = torch.zeros(num_groups, dtype=torch.float64).scatter_reduce(0, index, values, "amin", include_self=False)
    constant = highest == lowest
    stds = torch.where(constant, torch.zeros_like(variances), variances.sqrt())
    return GroupStats(index=index, counts=n, means=means, stds=stds, constant=constant)


def group_centered(values: torch.Tensor, stats: GroupStats) -> torch.Tensor:
    """v_i - mean_{g(i)}, exactly 0 in constant groups. float64 [N]."""
    centered = values.double() - stats.means[stats.index]
    return torch.where(stats.constant[stats.index], torch.zeros_like(centered), centered)


def group_standardized(values: torch.Tensor, stats: GroupStats, eps: float) -> torch.Tensor:
    """(v_i - mean_{g(i)}) / (std_{g(i)} + eps), unbiased std, exactly 0 in constant groups. float64 [N]."""
    return group_centered(values, stats) / (stats.stds[stats.index] + eps)


def batch_standardized(
    values: torch.Tensor, eps: float, mask: torch.Tensor | None = None, *, unbiased: bool = True
) -> torch.Tensor:
    """(v - mean) / (std + eps) with mean and std over the whole batch (over `mask` if given).

    The std is unbiased (n - 1) unless `unbiased=False` (population std, n), the choice of
    OpenRLHF's advantage whitening. Exactly 0 where the selected values are all equal (or fewer
    than 2), and outside `mask`. float64.
    """
    x = values.double()
    selected = x if mask is None else x[mask]
    if selected.numel() < 2 or selected.max() == selected.min():
        return torch.zeros_like(x)
    out = (x - selected.mean()) / (selected.std(correction=1 if unbiased else 0) + eps)
    return out if mask is None else out.masked_fill(~mask, 0.0)


def sample_metrics(advantages: torch.Tensor, stats: GroupStats | None = None) -> dict[str, float]:
    metrics = {"advantage_abs_mean": advantages.double().abs().mean().item()}
    if stats is not None:
        metrics["zero_variance_group_frac"] = stats.zero_variance_frac
    return metrics


# --- token level: a row's sampled (masked) positions, in order, are its time steps ---


def check_token_tensor(name: str, x: torch.Tensor | None, mask: torch.Tensor, num_samples: int) -> None:
    if mask.dim() != 2 or mask.shape[0] != num_samples or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool [N={num_samples}, T] tensor, got {mask.dtype} {tuple(mask.shape)}")
    if x is not None:
        if x.shape != mask.shape:
            raise ValueError(f"{name} must have the mask's shape {tuple(mask.shape)}, got {tuple(x.shape)}")
        if not torch.isfinite(x[mask]).all():
            raise ValueError(f"{name} must be finite on sampled tokens")


def last_sampled_token(mask: torch.Tensor) -> torch.Tensor:
    """[N, T] bool, true at the last sampled position of each row (nowhere for a row with none)."""
    return mask & (mask.long().cumsum(1) == mask.long().sum(1, keepdim=True))


def masked_reverse_discounted_sum(x: torch.Tensor, mask: torch.Tensor, discount: float) -> torch.Tensor:
    """y_t = sum_{l >= 0} discount^l x_{t+l} over the sampled steps of each row; 0 outside the mask."""
    x = x.double().masked_fill(~mask, 0.0)
    if discount == 1.0:
        return x.flip(1).cumsum(1).flip(1).masked_fill(~mask, 0.0)
    out = torch.zeros_like(x)
    running = torch.zeros(x.shape[0], dtype=torch.float64)
    for t in range(x.shape[1] - 1, -1, -1):
        running = torch.where(mask[:, t], x[:, t] + discount * running, running)
        out[:, t] = running
    return out.masked_fill(~mask, 0.0)


def next_sampled_value(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N, T]: at each position, the value at the row's next sampled position (0 after the last)."""
    values = values.double()
    out = torch.zeros_like(values)
    carry = torch.zeros(values.shape[0], dtype=torch.float64)
    for t in range(values.shape[1] - 1, -1, -1):
        out[:, t] = carry
        carry = torch.where(mask[:, t], values[:, t], carry)
    return out


def token_metrics(advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    selected = advantages.double()[mask]
    return {"advantage_abs_mean": selected.abs().mean().item() if selected.numel() else 0.0}
