"""Options that belong to one advantage estimator: refused when set for another (where they would
be silently ignored) or in a combination that changes what they mean. Runs before any model."""

from __future__ import annotations

from reinforge.algos.advantages import get_estimator
from reinforge.config import Config, ConfigError


def check_advantage_options(cfg: Config) -> None:
    algo = cfg.algo
    if algo.reinforce_reward != "raw":
        if algo.advantage != "reinforce":
            raise ConfigError(
                f"algo.reinforce_reward={algo.reinforce_reward} is an option of algo.advantage=reinforce (got {algo.advantage}); "
                "set algo.advantage=reinforce or drop algo.reinforce_reward"
            )
        if algo.kl_in_reward:
            raise ConfigError(
                "algo.reinforce_reward=signed reads the verifier's [0, 1] score as +-1, which a KL folded into the reward "
                "shifts off that scale; keep the KL in the loss (algo.kl_in_reward=false)"
            )
    if algo.mars_discount != "turn" and algo.advantage != "mars":
        raise ConfigError(
            f"algo.mars_discount={algo.mars_discount} is an option of algo.advantage=mars (got {algo.advantage}); "
            "set algo.advantage=mars or drop algo.mars_discount"
        )
    if algo.scale_rewards != "group" and algo.advantage != "grpo":
        raise ConfigError(
            f"algo.scale_rewards={algo.scale_rewards} is an option of algo.advantage=grpo (got {algo.advantage}); "
            "set algo.advantage=grpo or drop algo.scale_rewards"
        )
    if get_estimator(algo.advantage).needs_greedy_baseline:
        if cfg.trainer.partial_rollouts or len(cfg.policies) > 1:
            what = "trainer.partial_rollouts=true" if cfg.trainer.partial_rollouts else "a multi-policy run"
            raise ConfigError(
                f"algo.advantage={algo.advantage} needs one greedy rollout of each prompt beside its group, which only the "
                f"whole-group collection adds; {what} collects otherwise: drop it or pick another estimator"
            )
