"""PF-PPO: re-sample a batch by its rewards, so the samples whose reward is trusted are trained on more.

    pow         w_i = |R_i|^p                                   (p = algo.pf_ppo_pow, 2 by default)
    max_min     w_i = 1 if R_i is the batch's highest or lowest reward, else 0      ("best-worst")
    max_random  w_i = 0.4 if R_i is the batch's highest reward, else 0.1            ("best-random")
    w_i <- max(w_i + 1e-8, 1e-8)
    rows = N draws with replacement from Categorical(w / sum w)

and the update trains on those rows (a row drawn twice counts twice; a row not drawn is left out).

Source: Zhang, Shen, Zhao, Zhang, Xu, Dou, Bian, "Policy Filtration for RLHF to Mitigate Noise in
Reward Models" (ICML 2025; arXiv 2409.06957, first titled "Policy Filtration in RLHF to Fine-Tune
LLM for Code Generation"): a reward model is more reliable at the extremes of its scale than in
the middle, so filtering the batch toward the extremes raises the signal-to-noise ratio of the
policy gradient. The weights and the draw are verl's `compute_pf_ppo_reweight_data`
(verl/trainer/ppo/core_algos.py), R_i the sample's total score (reinforge: its scored reward,
before any KL penalty), max and min over the whole batch, as there. The draw takes a generator,
so a run is reproducible and resumable.
"""

from __future__ import annotations

import torch

METHODS = ("pow", "max_min", "max_random")


def pf_ppo_weights(scores: torch.Tensor, method: str, power: float = 2.0) -> torch.Tensor:
    """[N] sampling weights (unnormalized, > 0) of the samples' scores [N]."""
    if method not in METHODS:
        raise ValueError(f"unknown PF-PPO method {method!r}; valid: {', '.join(METHODS)}")
    scores = scores.detach()
    if method == "pow":
        weights = scores.abs().pow(power)
    elif method == "max_min":
        extreme = (scores == scores.max()) | (scores == scores.min())
        weights = torch.where(extreme, 1.0, 0.0).to(scores.dtype)
    else:
        weights = torch.where(scores == scores.max(), 0.4, 0.1).to(scores.dtype)
    return torch.clamp(weights + 1e-8, min=1e-8)


def pf_ppo_rows(scores: torch.Tensor, method: str, power: float = 2.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """[N] row indices, drawn with replacement in proportion to pf_ppo_weights."""
    weights = pf_ppo_weights(scores, method, power)
    return torch.multinomial(weights, scores.shape[0], replacement=True, generator=generator)
