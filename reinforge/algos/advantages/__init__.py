"""Advantage estimators by name, as selected by `algo.advantage`: the registry (registry.py, re-exported
here) and the built-in estimators, one file each, registered by importing them below."""

from __future__ import annotations

from reinforge.algos.advantages.registry import (  # noqa: F401
    ADVANTAGE_ESTIMATORS,
    ESTIMATOR_CONTRACT,
    Estimator,
    EstimatorSpec,
    get_estimator,
    register_advantage,
)

# Importing the estimator modules registers them.
from reinforge.algos.advantages import (  # noqa: F401
    dr_grpo,
    dr_mas,
    gae,
    gdpo,
    gpg,
    grpo,
    grpo_passk,
    mars,
    opo,
    optimal_token_baseline,
    optimal_token_baseline_multi_turn,
    pass_at_k,
    reinforce,
    reinforce_pp,
    remax,
    rloo,
    turn_rloo,
    value_prior,
)
from reinforge.algos.advantages.grpo import group_normalized_advantages  # noqa: F401
