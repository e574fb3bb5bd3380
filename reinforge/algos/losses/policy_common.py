"""What every policy loss shares: its parameters and a few masked-tensor helpers.

A policy loss is `fn(logprobs, old_logprobs, advantages, mask, params) -> (per_token_loss, metrics)`:
per_token_loss is [N, T], zero outside the mask, to be reduced by `aggregation.aggregate`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class PolicyLossParams:
    clip_eps_low: float = 0.2  # ppo_clip: ratio lower bound 1 - eps_low
    clip_eps_high: float = 0.2  # ppo_clip: ratio upper bound 1 + eps_high (DAPO clip-higher: 0.28)
    dual_clip_c: float | None = None  # ppo_clip: for A < 0 the loss is bounded by c * |A| (c > 1; 3 in Ye et al.)
    # GSPO clips a sequence-level ratio (a geometric mean of token ratios), which stays far closer to 1
    # than token ratios do, so it has its own, much smaller range: the paper's 3e-4 / 4e-4 (section 5.1).
    gspo_eps_low: float = 3e-4
    gspo_eps_high: float = 4e-4
    # CISPO truncates the detached IS weight at 1 + eps_high; the MiniMax-M1 report sets eps_low "to a
    # large value", i.e. no lower bound: None (the default) means no lower bound.
    cispo_eps_high: float = 5.0
    cispo_eps_low: float | None = None
    tis_weights: torch.Tensor | None = None  # [N, T] truncated IS weights (importance.py), multiply every term
    # SAPO's gate temperatures (sapo.py), for A > 0 and A <= 0: the paper's 1.0 / 1.05 (negative
    # tokens' gate decays faster: their updates raise the logits of many other tokens).
    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05
    # GMPO clips each token's log-ratio to [-eps_low, eps_high] (gmpo.py): the paper's 0.4 / 0.4.
    gmpo_eps_low: float = 0.4
    gmpo_eps_high: float = 0.4
    # Clip-Cov / KL-Cov (clip_cov.py, kl_cov.py): the share of sampled tokens singled out, Clip-Cov's
    # covariance band, and KL-Cov's coefficient (Cui et al. 2025; verl's defaults).
    clip_cov_ratio: float = 2e-4
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 2e-4
    kl_cov_coef: float = 1.0
    # Clip-Cov picks among its candidate tokens at random: this generator (None: torch's global one,
    # which a checkpoint saves, so a resumed run draws the same tokens).
    generator: torch.Generator | None = None
    # VESPO's gamma weight phi(w) = exp(lambda) w^k exp(-lambda w) (vespo.py), by the sign of A (TRL's defaults).
    vespo_k_pos: float = 2.0
    vespo_lambda_pos: float = 3.0
    vespo_k_neg: float = 3.0
    vespo_lambda_neg: float = 2.0

    def __post_init__(self) -> None:
        for name in (
            "clip_eps_low", "clip_eps_high", "gspo_eps_low", "gspo_eps_high", "cispo_eps_high", "gmpo_eps_low",
            "gmpo_eps_high", "kl_cov_coef", "vespo_k_pos", "vespo_k_neg",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("sapo_tau_pos", "sapo_tau_neg", "vespo_lambda_pos", "vespo_lambda_neg"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("clip_cov_ratio", "kl_cov_ratio"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} is a share of the sampled tokens, in (0, 1]; got {getattr(self, name)}")
        if self.clip_cov_lb >= self.clip_cov_ub:
            raise ValueError(f"clip_cov_lb must be < clip_cov_ub, got [{self.clip_cov_lb}, {self.clip_cov_ub}]")
        if self.cispo_eps_low is not None and self.cispo_eps_low < 0:
            raise ValueError(f"cispo_eps_low must be >= 0 or None, got {self.cispo_eps_low}")
        if self.dual_clip_c is not None and self.dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c must be > 1 (a bound of c * |A| below 1 * |A| would cut ordinary updates), got {self.dual_clip_c}")


PolicyLoss = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, PolicyLossParams],
    tuple[torch.Tensor, dict[str, float]],
]


def token_advantages(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[N] or [N, T] advantages as [N, T], in the dtype of `like`."""
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    return advantages.to(like.dtype).expand_as(like)


def masked_log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """logp - logp_old on sampled tokens, 0 elsewhere: exp() of padding never yields inf * 0 = nan."""
    return torch.where(mask, logprobs - old_logprobs, torch.zeros_like(logprobs))


def sequence_advantages(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N] advantages; [N, T] ones must not vary along the sampled tokens of a row."""
    if advantages.dim() == 1:
        return advantages
    zeros = torch.zeros_like(advantages)
    per_seq = torch.where(mask, advantages, zeros).sum(-1) / mask.sum(-1).clamp(min=1)  # mean over sampled tokens
    spread = torch.where(mask, (advantages - per_seq[:, None]).abs(), zeros)
    if (spread > 1e-6 * (1.0 + per_seq.abs()[:, None])).any():
        raise ValueError("a sequence-level loss needs one advantage per sequence: got [N, T] advantages that vary along the sampled tokens")
    return per_seq


def token_terms(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor):
    """What a token-level ratio loss starts from: (bool mask, [N, T] advantages, masked log-ratio)."""
    mask = mask.bool()
    return mask, token_advantages(advantages, logprobs), masked_log_ratio(logprobs, old_logprobs, mask)


def sequence_terms(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor):
    """What a sequence-level ratio loss starts from: (bool mask, [N] advantages, masked log-ratio)."""
    mask = mask.bool()
    return mask, sequence_advantages(advantages, mask).to(logprobs.dtype), masked_log_ratio(logprobs, old_logprobs, mask)


def finish(per_token: torch.Tensor, mask: torch.Tensor, params: PolicyLossParams) -> torch.Tensor:
    """Zero outside the mask; times the truncated IS weights if any."""
    if params.tis_weights is not None:
        per_token = per_token * params.tis_weights.detach().to(per_token.dtype)
    return torch.where(mask, per_token, torch.zeros_like(per_token))


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over sampled tokens as a float (0 on an empty mask), for metrics."""
    values = values.detach()
    count = int(mask.sum())
    return torch.where(mask, values, torch.zeros_like(values)).sum().item() / count if count else 0.0


def ratio_metrics(log_ratio: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """How far the policy moved from the old one: mean ratio and the k3 estimate of KL(old || new)."""
    log_ratio = log_ratio.detach()
    ratio = torch.exp(log_ratio)
    return {"ratio_mean": masked_mean(ratio, mask), "approx_kl_old": masked_mean(ratio - 1 - log_ratio, mask)}
