"""Policy losses, regularizers and their aggregation: small pure tensor functions, one idea per file.

    aggregation.py       per-token terms -> one scalar (token_mean, seq_mean_token_mean, ...)
    policy.py            the POLICY_LOSSES registry: ppo_clip, gspo, cispo, reinforce, sapo, gmpo,
                         clip_cov, kl_cov, luspo, vespo, rloo_seq (one file each)
    kl.py                k1 / k2 / k3 (and verl's abs, low_var_kl, straight-through "+") estimators of KL(pi || pi_ref)
    entropy.py           entropy of the next-token distribution, for an entropy bonus
    sample_weighting.py  per-sample advantage re-weighting (W-REINFORCE, ACE)
    importance.py        truncated importance-sampling weights against the behaviour policy
    entropy_selection.py     the top-entropy tokens a step trains on (Beyond the 80/20 rule)
    off_policy_mask.py       off-policy sequence masking of stale negative samples (DeepSeek-V3.2)
    divergence_rejection.py  rollout rejection by k2 / k3 between learner and engine, chained
    pf_ppo.py                PF-PPO: a batch re-sampled by reward
    adaptive_entropy.py      the adaptive entropy coefficient (Skywork-OR1), trainer state

Shapes: [N, T] aligned per token (index t predicts token t+1); `mask` bool [N, T] true on sampled
tokens; `advantages` [N] (broadcast over tokens) or [N, T].
"""
