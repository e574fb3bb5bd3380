"""Named methods: each paper's recipe as a preset of config keys (`algo.method=NAME`).

A method only fills keys the user did not set, so `algo.method=dapo algo.clip_eps_high=0.3`
means "DAPO, with my own upper clip". Adding a method is adding one entry here.
"""

from __future__ import annotations

from typing import Any

METHODS: dict[str, dict[str, Any]] = {
    # Shao et al. 2024 (DeepSeekMath): group-normalized advantages, PPO clip.
    "grpo": {"algo.advantage": "grpo"},
    # Liu et al. 2025 (Understanding R1-Zero-like training): no std division, no length normalization.
    "dr_grpo": {"algo.advantage": "dr_grpo", "algo.loss_agg": "constant"},
    # Ahmadian et al. 2024 (Back to Basics): leave-one-out baseline.
    "rloo": {"algo.advantage": "rloo"},
    # Hu et al. 2025 (REINFORCE++): batch-global normalization, KL folded into the reward token by
    # token. The KL is the paper's log-ratio (k1) with the coefficient and estimator that OpenRLHF,
    # its reference implementation, defaults to (--algo.kl.init_coef 0.01, --algo.kl.estimator k1).
    "reinforce_pp": {"algo.advantage": "reinforce_pp", "algo.kl_in_reward": True, "algo.kl_coef": 0.01, "algo.kl_estimator": "k1"},
    # REINFORCE++ w/ baseline: group-mean baseline, then the same batch-global normalization. Its
    # reference scripts (OpenRLHF train_reinforce_baseline_*.sh) put the KL in the loss, not the
    # reward (--algo.kl.use_loss --algo.kl.estimator k2 --algo.kl.init_coef 1e-5): so does this preset.
    "reinforce_pp_baseline": {
        "algo.advantage": "reinforce_pp_baseline", "algo.kl_in_reward": False, "algo.kl_coef": 1e-5, "algo.kl_estimator": "k2",
    },
    # Yu et al. 2025 (DAPO): clip-higher, token-level loss, dynamic sampling.
    "dapo": {"algo.advantage": "grpo", "algo.clip_eps_high": 0.28, "algo.loss_agg": "token_mean", "algo.dynamic_sampling": True},
    # Zheng et al. 2025 (GSPO): sequence-level ratio with its small clip ranges.
    "gspo": {"algo.advantage": "grpo", "algo.policy_loss": "gspo", "algo.loss_agg": "seq_mean_token_mean", "algo.clip_eps": 3e-4, "algo.clip_eps_high": 4e-4},
    # MiniMax-M1 2025 (CISPO): clipped, detached IS weight on a REINFORCE term.
    "cispo": {"algo.advantage": "grpo", "algo.policy_loss": "cispo", "algo.clip_eps_high": 4.0},
    # GDPO: each reward component normalized within its group, then combined.
    "gdpo": {"algo.advantage": "gdpo"},
    # Chen et al. 2025 (Pass@k training).
    "pass_at_k": {"algo.advantage": "pass_at_k", "algo.pass_k": 4},
    # Zhu et al. 2025 (The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning, arXiv
    # 2506.01347): W-REINFORCE, no baseline, the verifier's score read as +-1 and the positive samples
    # weighted by lambda = 0.1: +0.1 for a correct answer, -1 for a wrong one (an all-wrong group too).
    "w_reinforce": {"algo.advantage": "reinforce", "algo.reinforce_reward": "signed", "algo.positive_weight": 0.1},
    # Li et al. 2023 (ReMax, arXiv 2310.10505): REINFORCE (no ratio, no clip) with the greedy response's
    # reward as the baseline, one sampled response per prompt.
    "remax": {"algo.advantage": "remax", "algo.policy_loss": "reinforce", "rollout.group_size": 1},
    # Hao et al. 2025 (On-Policy RL with Optimal Reward Baseline, arXiv 2505.23585): exact on-policy
    # training (one optimizer step per batch), the length-weighted baseline, no KL, no entropy bonus.
    "opo": {"algo.advantage": "opo", "algo.epochs": 1, "algo.mini_batches": 1, "algo.kl_coef": 0.0, "algo.entropy_coef": 0.0},
    # Chu et al. 2025 (GPG, arXiv 2504.02546): the plain policy gradient (no ratio, no clip, no KL, no
    # reference) on alpha-scaled group-centred rewards.
    "gpg": {"algo.advantage": "gpg", "algo.policy_loss": "reinforce", "algo.kl_coef": 0.0},
    # Schulman et al. 2017 + GAE: classic PPO with a learned critic.
    "ppo": {"algo.advantage": "gae", "critic.enabled": True, "algo.lam": 0.95},
    # Wang et al. 2025 (Beyond the 80/20 Rule, arXiv 2506.01939): DAPO, with the policy gradient kept
    # only on the top 20% of tokens by entropy.
    "beyond_80_20": {
        "algo.advantage": "grpo", "algo.clip_eps_high": 0.28, "algo.loss_agg": "token_mean", "algo.dynamic_sampling": True,
        "algo.top_entropy_quantile": 0.2,
    },
    # Zhang et al. 2025 (Policy Filtration for RLHF, PF-PPO, arXiv 2409.06957): PPO with a critic, each
    # batch re-sampled by reward; the weighting is verl's default for it (|R|^2).
    "pf_ppo": {"algo.advantage": "gae", "critic.enabled": True, "algo.lam": 0.95, "algo.pf_ppo": "pow", "algo.pf_ppo_pow": 2.0},
    # Gao et al. 2025 (SAPO, arXiv:2511.20347): GRPO advantages, the smooth gate with the paper's
    # temperatures 1.0 / 1.05, the sequence-mean of token means (verl's sapo example, TRL's sapo).
    "sapo": {
        "algo.advantage": "grpo", "algo.policy_loss": "sapo", "algo.loss_agg": "seq_mean_token_mean",
        "algo.sapo_tau_pos": 1.0, "algo.sapo_tau_neg": 1.05,
    },
    # Zhao et al. 2025 (GMPO, arXiv:2507.20673): geometric mean of token ratios, log-ratios clipped to
    # [-0.4, 0.4] (the authors' verl example: clip_ratio_low = clip_ratio_high = 0.4), no KL.
    "gmpo": {"algo.advantage": "grpo", "algo.policy_loss": "gmpo", "algo.loss_agg": "seq_mean_token_mean", "algo.clip_eps": 0.4, "algo.clip_eps_high": 0.4},
    # Cui et al. 2025 (The Entropy Mechanism of RL for Reasoning LMs, arXiv:2505.22617), the authors'
    # recipe/dapo/7b_clip_cov.sh: DAPO's dynamic sampling and token-mean loss, PPO clip range 1 (ratios
    # in [0, 2]: the covariance cut does the work), 2e-4 of the tokens cut from the band [1, 5], no KL.
    "clip_cov": {
        "algo.advantage": "grpo", "algo.policy_loss": "clip_cov", "algo.loss_agg": "token_mean", "algo.dynamic_sampling": True,
        "algo.clip_eps": 1.0, "algo.clip_eps_high": 1.0, "algo.clip_cov_ratio": 2e-4, "algo.clip_cov_lb": 1.0, "algo.clip_cov_ub": 5.0,
    },
    # Same paper, recipe/dapo/7b_kl_cov.sh: k = 0.2% of the tokens (k_percent=0.2; the 32B recipe uses
    # 0.02%), penalty coefficient 1, DAPO's dynamic sampling and token-mean loss, no KL to a reference.
    "kl_cov": {
        "algo.advantage": "grpo", "algo.policy_loss": "kl_cov", "algo.loss_agg": "token_mean", "algo.dynamic_sampling": True,
        "algo.kl_cov_ratio": 2e-3, "algo.kl_cov_coef": 1.0,
    },
}


def method_overrides(name: str) -> dict[str, Any]:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; valid: {', '.join(sorted(METHODS))}")
    return METHODS[name]
