"""The token-selection, masking and re-weighting keys of algo, checked before compute: each refusal
names the key and the fix (reinforge.algos.losses: entropy_selection, off_policy_mask,
divergence_rejection, rollout_correction, pf_ppo, adaptive_entropy)."""

from __future__ import annotations

from reinforge.config import Config, ConfigError

ADAPTIVE_KEYS = ("entropy_target", "entropy_coef_delta", "entropy_coef_min", "entropy_coef_max")


def changed(section, key: str) -> bool:
    """Set to other than its default. Not `model_fields_set`: a resumed run's saved config sets every key."""
    return getattr(section, key) != type(section).model_fields[key].default


def check_selection(cfg: Config) -> None:
    algo = cfg.algo
    for key in ("tis_floor", "tis_normalize"):
        if getattr(algo, key) not in (None, False) and algo.tis_cap is None:
            raise ConfigError(f"algo.{key} acts on the algo.tis_cap importance weights, but algo.tis_cap is unset; set algo.tis_cap (e.g. 2.0)")
    if algo.tis_floor is not None and algo.tis_cap is not None and algo.tis_floor > algo.tis_cap:
        raise ConfigError(f"algo.tis_floor={algo.tis_floor:g} is above algo.tis_cap={algo.tis_cap:g}; the floor must be <= 1 <= the cap")
    check_rollout_reject(algo)
    if algo.pf_ppo is None and changed(algo, "pf_ppo_pow"):
        raise ConfigError("algo.pf_ppo_pow is the exponent of algo.pf_ppo=pow, which is unset; set algo.pf_ppo=pow or remove it")
    if algo.pf_ppo == "pow" and algo.pf_ppo_pow == 0:
        raise ConfigError("algo.pf_ppo=pow with algo.pf_ppo_pow=0 weighs every sample 1: a plain bootstrap of the batch; set a power > 0")
    check_adaptive_entropy(cfg)


def check_rollout_reject(algo) -> None:
    options, thresholds = algo.rollout_reject, algo.rollout_reject_threshold
    if not options:
        if thresholds:
            raise ConfigError("algo.rollout_reject_threshold bounds the algo.rollout_reject criteria, which are unset; set e.g. algo.rollout_reject=[token_k3] or remove it")
        return
    if len(set(options)) != len(options):
        raise ConfigError(f"algo.rollout_reject lists a criterion twice: {options}")
    if not thresholds:
        raise ConfigError(f"algo.rollout_reject={options} needs algo.rollout_reject_threshold: one upper bound shared, or one per criterion (e.g. [0.01])")
    if len(thresholds) not in (1, len(options)):
        raise ConfigError(
            f"algo.rollout_reject_threshold has {len(thresholds)} values for {len(options)} criteria in algo.rollout_reject; give one shared or one each"
        )
    if any(c <= 0 for c in thresholds):
        raise ConfigError(f"algo.rollout_reject_threshold must be > 0 (k2 and k3 are >= 0, so 0 rejects every token that moved), got {thresholds}")


def check_adaptive_entropy(cfg: Config) -> None:
    algo = cfg.algo
    if not algo.adaptive_entropy:
        stray = [key for key in ADAPTIVE_KEYS if changed(algo, key)]
        if stray:
            raise ConfigError(f"algo.{stray[0]} is a setting of algo.adaptive_entropy, which is off; set algo.adaptive_entropy=true or remove it")
        return
    if not algo.entropy_coef_min <= algo.entropy_coef <= algo.entropy_coef_max:
        raise ConfigError(
            f"algo.adaptive_entropy starts from algo.entropy_coef={algo.entropy_coef:g}, which must lie in "
            f"[algo.entropy_coef_min={algo.entropy_coef_min:g}, algo.entropy_coef_max={algo.entropy_coef_max:g}]"
        )
    if cfg.workers.learners > 1:
        raise ConfigError(
            "algo.adaptive_entropy with workers.learners > 1: the coefficient is driver state updated from the entropy each "
            "learner measures on its own shard, which is not gathered across learners yet; use one learner or a fixed algo.entropy_coef"
        )
