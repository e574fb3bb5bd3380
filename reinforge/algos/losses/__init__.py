"""Policy losses, regularizers and their aggregation: small pure tensor functions, one idea per file.

    aggregation.py       per-token terms -> one scalar (token_mean, seq_mean_token_mean, ...)
    policy.py            the POLICY_LOSSES registry: ppo_clip, gspo, cispo, reinforce, sapo, gmpo,
                         clip_cov, kl_cov, luspo, vespo, rloo_seq (one file each)
    kl.py                k1 / k2 / k3 (and verl's abs, low_var_kl, straight-through "+") estimators of KL(pi || pi_ref)
    entropy.py           entropy of the next-token distribution, for an entropy bonus
    sample_weighting.py  per-sample advantage re-weighting (W-REINFORCE, ACE)
    importance.py        truncated importance-sampling weights against the behaviour policy

Shapes: [N, T] aligned per token (index t predicts token t+1); `mask` bool [N, T] true on sampled
tokens; `advantages` [N] (broadcast over tokens) or [N, T].
"""
