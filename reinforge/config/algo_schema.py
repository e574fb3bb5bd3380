"""The `algo` config section: the RL method, each choice a name in a registry of reinforge.algos.
Kept out of schema.py because it is one idea (and a long one: every method's options)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from reinforge.config.section import Section


class AlgoConfig(Section):
    """The RL method: each choice is a name in a registry of reinforge.algos."""

    method: str | None = Field(
        None, description="A named preset of the keys below (reinforge.algos.methods), e.g. dr_grpo, dapo, gspo, ppo; keys set explicitly win."
    )
    advantage: str = Field("grpo", description="Advantage estimator (reinforge.algos.advantages): grpo, dr_grpo, dr_mas (per agent, for games), rloo, reinforce_pp, reinforce_pp_baseline, gdpo, pass_at_k, gae, v05_prior (the group mean shrunk toward the prompt-value model's prediction; prompt_value.enabled), reinforce (no baseline; algo.reinforce_reward), remax (baseline: a greedy rollout's reward, rolled out per prompt), opo (length-weighted group baseline), gpg, grpo_passk (only each group's best sample), optimal_token_baseline and optimal_token_baseline_multi_turn (per-token baseline; one extra learner forward), or your own by import path.")
    policy_loss: str = Field("ppo_clip", description="Policy loss (reinforge.algos.losses): ppo_clip, gspo, cispo, reinforce, sapo (smooth gate), gmpo (geometric mean; clip_eps / clip_eps_high bound the log-ratio), clip_cov, kl_cov, luspo, vespo, rloo_seq (TRL RLOO's full-sequence ratio), or your own by import path.")
    loss_agg: str = Field("token_mean", description="Loss aggregation: token_mean, seq_mean_token_mean, seq_mean_token_sum, constant (Dr. GRPO).")
    lr: float = Field(1e-4, gt=0, description="Policy learning rate (AdamW).")
    lr_warmup_steps: int = Field(
        0, ge=0, description="Policy optimizer steps over which the learning rate rises linearly to algo.lr (0: none). Adam's first steps move every weight by the full lr whatever its gradient (reinforge.learner.policy_learner.warmup_lr)."
    )
    weight_decay: float = Field(0.0, ge=0, description="Policy AdamW weight decay.")
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range, lower side (and upper side unless clip_eps_high is set).")
    clip_eps_high: float | None = Field(None, gt=0, description="Upper clip range (DAPO clip-higher, e.g. 0.28); default clip_eps.")
    dual_clip_c: float | None = Field(None, gt=1, description="Dual-clip bound c for negative advantages (e.g. 3.0); None disables.")
    kl_coef: float = Field(0.0, ge=0, description="Weight of the KL to a frozen reference; 0 loads no reference.")
    kl_estimator: Literal["k1", "k2", "k3", "abs", "low_var_kl", "k1+", "k3+", "low_var_kl+"] = Field(
        "k3",
        description="KL estimator (Schulman 2020; reinforge.algos.losses.kl): k1, k2, k3; verl's abs (|log-ratio|), low_var_kl (k3 clamped to [-10, 10]), and k1+ / k3+ / low_var_kl+ (that estimator's value with k2's gradient, straight-through: the unbiased gradient of KL).",
    )
    kl_in_reward: bool = Field(False, description="Subtract the KL from the reward instead of adding it to the loss.")
    ref_reset_every: int | None = Field(None, gt=0, description="Reset the reference to the current policy every N steps (ProRL).")
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus weight (entropy is logged every step either way).")
    positive_weight: float = Field(1.0, ge=0, description="Scale of positive advantages (W-REINFORCE uses 0.1).")
    negative_weight: float = Field(1.0, ge=0, description="Scale of negative advantages.")
    ace_alpha: float = Field(0.0, ge=0, description="ACE: scale negative advantages by 1 + alpha * shape(log pi/pi_ref of the sample); loads a reference.")
    ace_shape: Literal["softplus", "relu"] = Field("softplus", description="ACE: softplus (the paper's choice) or relu (errors no surer than the reference are left alone).")
    tis_cap: float | None = Field(None, gt=0, description="Truncated importance sampling cap against behaviour log-probs (e.g. 2.0); None disables.")
    tis_level: Literal["token", "sequence", "geometric"] = Field(
        "token",
        description="Ratio the algo.tis_cap weights truncate (reinforge.algos.losses.rollout_correction): token = exp(learner - engine log-prob) per token; sequence = their product over a sample (one weight per sample); geometric = the product's per-token geometric mean.",
    )
    rollout_mask: Literal["token", "sequence", "geometric"] | None = Field(
        None,
        description="Rollout rejection: tokens (token) or whole samples (sequence, geometric) whose learner/engine ratio at that level leaves [rollout_mask_low, rollout_mask_high] leave the loss; costs one no-grad learner forward per step. None disables.",
    )
    rollout_mask_low: float | None = Field(None, gt=0, description="Lower end of the rollout_mask band (at most 1); default 1 / rollout_mask_high.")
    rollout_mask_high: float | None = Field(
        None, gt=0, description="Upper end of the rollout_mask band (at least 1), e.g. 2.0 for token or sequence, 1.001 for geometric; required with rollout_mask."
    )
    gamma: float = Field(1.0, gt=0, le=1, description="Discount (gae, and over turns for turn_rloo).")
    lam: float = Field(1.0, ge=0, le=1, description="GAE lambda.")
    pass_k: int = Field(1, gt=0, description="k of the pass@k estimator.")
    turn_reward_fix: Literal["none", "clip", "delta", "potential"] = Field(
        "none",
        description="Per-turn rewards, bounded against process-reward hacking: clip (min(r, 0)), delta (r_t - r_{t+1}), or potential (read as potentials Phi: gamma*Phi_t - Phi_{t-1}).",
    )
    turn_reward_gate: float | None = Field(
        None, description="G-RA: per-turn rewards count only when the episode's outcome reward reaches this threshold; None disables."
    )
    drop_void_turns: bool = Field(
        False, description="SimpleTIR: episodes with a void turn (neither a tool call nor an answer) are left out of the loss."
    )
    dynamic_sampling: bool = Field(False, description="DAPO: drop groups whose rewards are all equal and sample more.")
    max_sampling_rounds: int = Field(3, gt=0, le=16, description="Cap on rollout rounds per step under dynamic sampling.")
    epochs: int = Field(1, gt=0, description="Passes over each rollout batch.")
    mini_batches: int = Field(1, gt=0, description="Optimizer steps per pass over a rollout batch.")
    micro_batch_size: int = Field(64, gt=0, description="Sequences per forward/backward (gradient accumulation).")
    max_tokens_per_microbatch: int | None = Field(
        None,
        gt=0,
        description="Micro-batches by a token budget instead of micro_batch_size rows, for the update, the reference and the old-log-prob passes: rows are taken in order while rows x the longest row's length (pads included) stays within it; a longer row goes alone. The loss is the same (each micro-batch's share of the mini-batch's). None: micro_batch_size rows.",
    )
    logprob_max_tokens: int | None = Field(
        None,
        gt=0,
        description="Token budget of the log-prob passes without gradients (the reference's, and the old policy's when it is recomputed), by the same rule as max_tokens_per_microbatch. They keep no activations for a backward, so a budget above the update's costs one layer's transient tensors and feeds the matmuls more rows (SmolLM2-135M, 8 x 4 x 128: the reference pass 13.9 -> 10.8 CPU-s with the whole step in one pass). verl's log_prob_max_token_len_per_gpu. None: max_tokens_per_microbatch.",
    )
    logprob_chunk_tokens: int | None = Field(
        512,
        gt=0,
        description="Tokens per chunk of the log-softmax over the vocabulary, forward and backward (reinforge.learner.chunked_logprobs): the [tokens, vocabulary] logits are never held for more than two chunks' worth (an update micro-batch of up to 1.5 chunks keeps its log-softmax for the backward instead of recomputing it). 512: 231 MiB above the inputs for 4,096 tokens x 49,152 vocabulary in fp32 forward + backward (the whole logits: 3.7 GiB), at the speed of larger chunks. None computes the whole logits at once.",
    )
    activation_checkpointing: bool = Field(
        False,
        description="Decoder layers keep only their inputs and recompute their activations in the backward (non-reentrant torch.utils.checkpoint; transformers' gradient checkpointing on the padded forward): less memory for ~1 more forward per update. The gradients then stay allocated between steps, zeroed in place (the update holds them beside the layer inputs).",
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient-norm clipping bound of the policy (and critic) updates.")
    bf16_autocast: bool = Field(
        False,
        description="bfloat16 autocast for the learner's forward/backward (CPU or CUDA, from the model's device); weights, gradients and AdamW state stay float32. See docs/benchmarks.md, 'bf16'.",
    )
    compile_forward: bool = Field(
        False,
        description="torch.compile (inductor, dynamic shapes) the forward of the policy learner and the reference model: forward + backward ~1.7x faster on the micro preset on a CPU, after a compile per process (70 s idle to 7 min on a busy 2-core box with an empty cache; needs a C++ compiler); log-probs move by float rounding (<= 1e-6 measured). See the docs/benchmarks.md.",
    )
    pack_sequences: bool = Field(
        True,
        description="Learner and reference forwards compute each distinct token once: no pads, and a prefix that rows share (a group's prompt) once for all of them (Prefix Grouper, Liu et al. 2025); same log-probs, gradients to float rounding. For Llama, Mistral and Qwen2 models, with the C kernels (algo.packed_kernels) always, with torch's ops when it saves 5% of the positions or more; off under compile_forward. See the docs/benchmarks.md.",
    )
    packed_kernels: Literal["auto", "torch", "native"] = Field(
        "auto",
        description="Kernels of the packed forward (pack_sequences): native = its attention, RMSNorm and SwiGLU in C, forward and backward (the attention reads the packed tokens where they are), compiled on first use with the machine's C compiler (reinforge.learner.packed_kernels); torch = torch's ops (SDPA on the padded layout, the model's own modules); auto = native on CPU float32 with one torch thread when a compiler is there, else torch. See the docs/benchmarks.md.",
    )
    reinforce_reward: Literal["raw", "signed"] = Field(
        "raw",
        description="algo.advantage=reinforce (no baseline): raw = each sample's reward is its advantage; signed = a [0, 1] verifier score s read as the W-REINFORCE paper's +-1 reward, 2s - 1 (correct +1, wrong -1; the w_reinforce preset).",
    )
    mars_discount: Literal["turn", "token"] = Field(
        "turn",
        description="algo.advantage=mars with algo.gamma < 1: turn = gamma per policy turn (the MARS paper's turn-level return); token = gamma per token position, observation tokens included, each turn's reward at its last token (the authors' code, compute_reinforce_return).",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group",
        description="algo.advantage=grpo: what the group-centred rewards are divided by (TRL's scale_rewards): group = the group's std (GRPO); batch = the std of all the batch's rewards (Lite PPO); none = nothing (Dr. GRPO's advantage).",
    )
    # Token selection, masking and re-weighting (reinforge.algos.losses: entropy_selection, off_policy_mask,
    # divergence_rejection, rollout_correction, pf_ppo, adaptive_entropy); checked by reinforge.run.selection_check.
    top_entropy_quantile: float = Field(
        1.0, ge=0, le=1, description="Train the policy term only on this top share of sampled tokens by entropy (Wang et al. 2025, 'Beyond the 80/20 rule': 0.2; TRL top_entropy_quantile); 1 keeps every token. The threshold is taken per micro-batch. Logged: mask/top_entropy_dropped_frac."
    )
    mask_truncated: bool = Field(
        False, description="Samples cut by the token limit (finish reason length or max_tokens) leave the loss; their rewards still count in their group's baseline (DAPO; TRL mask_truncated_completions). Logged: mask/truncated_frac."
    )
    off_policy_mask_threshold: float | None = Field(
        None, gt=0, description="Off-policy sequence masking (DeepSeek-V3.2; TRL off_policy_mask_threshold), e.g. 0.5: a sample with a negative advantage whose mean log(pi_engine / pi) exceeds this leaves the loss. None disables. Logged: mask/off_policy_dropped_frac."
    )
    tis_floor: float | None = Field(
        None, gt=0, le=1, description="Lower clip of the algo.tis_cap importance weights, w = clip(r, tis_floor, tis_cap) (TRL vllm_importance_sampling_clip_min); None: no lower clip. Needs algo.tis_cap."
    )
    tis_normalize: bool = Field(
        False, description="Divide the algo.tis_cap importance weights by their batch mean (per token, or per sample at the sequence / geometric levels), verl rollout_is_batch_normalize. Needs algo.tis_cap."
    )
    rollout_reject: list[Literal["token_k2", "token_k3", "seq_sum_k2", "seq_sum_k3", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3"]] = Field(
        default_factory=list,
        description="Rollout rejection by divergence between learner and engine (verl rollout_rs): tokens (token_*) or whole samples (seq_sum_*, seq_mean_*, seq_max_*) whose k2 / k3 exceeds algo.rollout_reject_threshold leave the loss; several criteria chain (all must pass), e.g. [token_k3, seq_max_k2]. Costs one no-grad learner forward per step. Logged: mask/rollout_reject_frac.",
    )
    rollout_reject_threshold: list[float] = Field(
        default_factory=list, description="Upper bounds of the algo.rollout_reject criteria: one shared, or one per criterion in order (each > 0)."
    )
    pf_ppo: Literal["pow", "max_min", "max_random"] | None = Field(
        None, description="PF-PPO (Zhang et al. 2025): re-sample each step's batch with replacement by reward, pow = |R|^algo.pf_ppo_pow, max_min = only the batch's best and worst, max_random = best 0.4, others 0.1 (verl compute_pf_ppo_reweight_data). None disables. Logged: mask/pf_ppo_dropped_frac."
    )
    pf_ppo_pow: float = Field(2.0, ge=0, description="Exponent of algo.pf_ppo=pow.")
    adaptive_entropy: bool = Field(
        False, description="Adaptive entropy coefficient (Skywork-OR1; TRL use_adaptive_entropy): algo.entropy_coef is the start, raised by algo.entropy_coef_delta after an optimizer step whose entropy is at most algo.entropy_target, lowered otherwise, applied only while at or below the target. Logged as entropy_coef (with several policies one coefficient each, policy/<name>/entropy_coef); saved in checkpoints."
    )
    entropy_target: float = Field(0.2, ge=0, description="algo.adaptive_entropy: the target mean token entropy in nats (TRL's default 0.2; set it near the entropy logged early in training).")
    entropy_coef_delta: float = Field(0.005, gt=0, description="algo.adaptive_entropy: the step of the coefficient per optimizer step.")
    entropy_coef_min: float = Field(0.0, ge=0, description="algo.adaptive_entropy: lower bound of the coefficient.")
    entropy_coef_max: float = Field(1.0, ge=0, description="algo.adaptive_entropy: upper bound of the coefficient.")
    sapo_tau_pos: float = Field(
        1.0, gt=0, description="policy_loss=sapo: temperature of the smooth gate (4/tau) sigmoid(tau (r - 1)) for tokens with A > 0 (Gao et al. 2025: 1.0); larger fades off-policy tokens faster."
    )
    sapo_tau_neg: float = Field(1.05, gt=0, description="policy_loss=sapo: gate temperature for tokens with A <= 0 (the paper's 1.05).")
    clip_cov_ratio: float = Field(
        2e-4, gt=0, le=1, description="policy_loss=clip_cov: share of a micro-batch's sampled tokens (at least one) whose gradient is cut, drawn among those with covariance in [clip_cov_lb, clip_cov_ub] (Cui et al. 2025: 2e-4)."
    )
    clip_cov_lb: float = Field(1.0, description="policy_loss=clip_cov: lower end of the covariance band (A - mean A)(logp - mean logp) of the tokens it may cut.")
    clip_cov_ub: float = Field(5.0, description="policy_loss=clip_cov: upper end of that covariance band (above clip_cov_lb).")
    kl_cov_ratio: float = Field(
        2e-4, gt=0, le=1, description="policy_loss=kl_cov: share of a micro-batch's sampled tokens (at least one), those of largest covariance, that pay kl_cov_coef * |logp - logp_old| (Cui et al. 2025: 2e-3 for 7B, 2e-4 for 32B)."
    )
    kl_cov_coef: float = Field(1.0, ge=0, description="policy_loss=kl_cov: coefficient of the |log-ratio| penalty on the selected tokens (the paper's 1).")
    vespo_k_pos: float = Field(2.0, ge=0, description="policy_loss=vespo: power k of the gamma weight phi(w) = e^lambda w^k e^(-lambda w) on the sequence ratio w, for A >= 0 (TRL's 2).")
    vespo_lambda_pos: float = Field(3.0, gt=0, description="policy_loss=vespo: decay lambda of phi(w) for A >= 0 (TRL's 3).")
    vespo_k_neg: float = Field(3.0, ge=0, description="policy_loss=vespo: power k of phi(w) for A < 0 (TRL's 3).")
    vespo_lambda_neg: float = Field(2.0, gt=0, description="policy_loss=vespo: decay lambda of phi(w) for A < 0 (TRL's 2).")
    kl_bias_correction: bool = Field(
        False,
        description="The KL term in the loss times the token's importance ratio pi_theta / pi_old (differentiable): the unbiased gradient of KL(pi_theta || pi_ref) from samples of pi_old (DeepSeek-V3.2; TRL's use_bias_correction_kl, on by default there). Needs the KL in the loss (kl_coef > 0, kl_in_reward false).",
    )
    kl_ctrl: Literal["fixed", "adaptive"] = Field(
        "fixed",
        description="KL coefficient: fixed (kl_coef throughout) or adaptive (verl's AdaptiveKLController, Ziegler et al. 2019: starts at kl_coef and after each step is multiplied by 1 + clip(KL / kl_target - 1, -0.2, 0.2) * batch size / kl_horizon; logged as kl_coef, saved in checkpoints; with several policies one controller each, logged as policy/<name>/kl_coef).",
    )
    kl_target: float = Field(0.1, gt=0, description="kl_ctrl=adaptive: the KL to the reference (per token, the sampling policy's) the coefficient steers toward (verl's 0.1).")
    kl_horizon: int = Field(10000, gt=0, description="kl_ctrl=adaptive: samples over which the coefficient moves by up to 20% (verl's 10000).")
    ref_mixup_alpha: float = Field(
        1.0,
        gt=0,
        le=1,
        description="At every algo.ref_reset_every steps the reference becomes alpha * policy + (1 - alpha) * reference, weight by weight (TR-DPO's soft update; TRL's sync_ref_model with ref_model_mixup_alpha, e.g. 0.6); 1.0 is the hard reset.",
    )
