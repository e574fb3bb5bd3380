"""Policy losses by name, as selected by config (in the spirit of verl's registry).

Every entry is `fn(logprobs, old_logprobs, advantages, mask, params: PolicyLossParams)
-> (per_token_loss [N, T], metrics)`; the per-token terms are zero outside the mask and are reduced
to a scalar by `aggregation.aggregate`. Formulas and papers are in each loss's own file:

    ppo_clip   ppo_clip.py    PPO clip, DAPO clip-higher, optional dual clip
    gspo       gspo.py        sequence-level ratio and clip (needs seq_mean_token_mean)
    cispo      cispo.py       REINFORCE with a clipped, detached IS weight
    reinforce  reinforce.py   plain on-policy REINFORCE
    sapo       sapo.py        SAPO: a smooth sigmoid gate on the token ratio instead of the clip
    gmpo       gmpo.py        GMPO: geometric mean of log-clipped token ratios (needs seq_mean_token_mean)
    clip_cov   clip_cov.py    Clip-Cov: PPO clip, gradient cut on a few high-covariance tokens
    kl_cov     kl_cov.py      KL-Cov: |log-ratio| penalty on the highest-covariance tokens
    luspo      luspo.py       LUSPO: GSPO scaled by length (needs seq_mean_token_sum)
    vespo      vespo.py       VESPO: REINFORCE weighted by a gamma kernel of the sequence ratio
    rloo_seq   rloo_seq.py    TRL RLOO's loss: PPO clip on the full-sequence ratio (needs seq_mean_token_mean)

With `params.tis_weights` (importance.truncated_is_weights) every loss multiplies its per-token
term by those weights.
"""

from __future__ import annotations

import inspect

from reinforge.algos.losses.cispo import cispo
from reinforge.algos.losses.gspo import gspo
from reinforge.algos.losses.policy_common import PolicyLoss, PolicyLossParams
from reinforge.algos.losses.ppo_clip import ppo_clip
from reinforge.algos.losses.reinforce import reinforce
from reinforge.algos.losses.sapo import sapo
from reinforge.algos.losses.gmpo import gmpo
from reinforge.algos.losses.clip_cov import clip_cov
from reinforge.algos.losses.kl_cov import kl_cov
from reinforge.algos.losses.luspo import luspo
from reinforge.algos.losses.vespo import vespo
from reinforge.algos.losses.rloo_seq import rloo_seq
from reinforge.import_paths import check_call, is_import_path, load_object

__all__ = ["POLICY_LOSSES", "REQUIRED_AGGREGATION", "PolicyLoss", "PolicyLossParams", "get_policy_loss"]

POLICY_LOSSES: dict[str, PolicyLoss] = {
    "ppo_clip": ppo_clip,
    "gspo": gspo,
    "cispo": cispo,
    "reinforce": reinforce,
    "sapo": sapo,
    "gmpo": gmpo,
    "clip_cov": clip_cov,
    "kl_cov": kl_cov,
    "luspo": luspo,
    "vespo": vespo,
    "rloo_seq": rloo_seq,
}

# Losses that are only defined under one aggregation (validated against the config before compute).
REQUIRED_AGGREGATION: dict[str, str] = {
    "gspo": "seq_mean_token_mean",
    "gmpo": "seq_mean_token_mean",
    "luspo": "seq_mean_token_sum",
    "rloo_seq": "seq_mean_token_mean",
}


LOSS_CONTRACT = (
    "a policy loss is fn(logprobs, old_logprobs, advantages, mask, params: PolicyLossParams) -> "
    "(per_token_loss [N, T], metrics: dict) (reinforge.algos.losses.policy)"
)


def get_policy_loss(name: str) -> PolicyLoss:
    """A built-in loss by name, or the user's own by import path (`pkg.algos:my_loss`)."""
    if is_import_path(name):
        fn = load_object(name)
        if inspect.isclass(fn):  # calling it would build an instance, not return a loss
            raise ValueError(f"{name} is a class; {LOSS_CONTRACT}")
        check_call(fn, (None,) * 5, {}, name, LOSS_CONTRACT)
        return fn
    if name not in POLICY_LOSSES:
        raise ValueError(
            f"unknown policy loss {name!r}; built-in: {', '.join(sorted(POLICY_LOSSES))}; "
            "or your own as 'package.module:name' or './file.py:name'"
        )
    return POLICY_LOSSES[name]
