"""Advantage estimators by name, as selected by `algo.advantage` (in the spirit of verl's registry).

Every estimator is a pure function `fn(inputs: AdvantageInputs) -> AdvantageOutput` in its own file
of this package, registered with `@register_advantage(name, ...)`. To add a built-in one: write the
file, decorate the function, import the module in this package's __init__.py, and add a test. A
user's own estimator is named by import path in `algo.advantage` instead (no file here changes).
The registry is this module, apart from the package's __init__.py that imports every estimator:
an estimator imports only the registry, so nothing imports in a circle.

Output shape: per sample [N] (outcome estimators) or per token [N, T] (gae, reinforce_pp and
reinforce_pp_baseline, which whiten over the batch's sampled tokens), zero outside `inputs.mask`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from reinforge.algos.types import AdvantageInputs, AdvantageOutput
from reinforge.import_paths import check_call, is_import_path, load_object

Estimator = Callable[[AdvantageInputs], AdvantageOutput]


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    fn: Estimator
    min_group_size: int  # validated against rollout.group_size before any compute
    needs_critic: bool  # the trainer must provide inputs.values (a value model)
    token_rewards: bool = False  # uses inputs.token_rewards (a per-token KL reward) itself
    turn_level: bool = False  # uses inputs.turn_rewards / turn_index (multi-turn credit assignment)
    needs_prompt_values: bool = False  # the trainer must provide inputs.prompt_values (the prompt-value model, prompt_value.enabled)
    needs_policy_probs: bool = False  # the trainer must provide inputs.old_logprobs and inputs.sum_pi_squared (a learner forward)
    needs_greedy_baseline: bool = False  # the trainer must provide inputs.greedy_rewards (one greedy rollout per prompt, scored)


ADVANTAGE_ESTIMATORS: dict[str, EstimatorSpec] = {}


def register_advantage(
    name: str, *, min_group_size: int = 1, needs_critic: bool = False, token_rewards: bool = False,
    turn_level: bool = False, needs_prompt_values: bool = False, needs_policy_probs: bool = False,
    needs_greedy_baseline: bool = False,
) -> Callable[[Estimator], Estimator]:
    """Register `fn` under `name`; the function itself is returned unchanged."""
    if min_group_size < 1:
        raise ValueError(f"min_group_size must be >= 1, got {min_group_size}")

    def decorator(fn: Estimator) -> Estimator:
        existing = ADVANTAGE_ESTIMATORS.get(name)
        # Re-importing the same module (e.g. importlib.reload) re-registers the same function: allowed.
        if existing is not None and (existing.fn.__module__, existing.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"advantage estimator {name!r} is already registered by {existing.fn.__module__}")
        ADVANTAGE_ESTIMATORS[name] = EstimatorSpec(
            name, fn, min_group_size, needs_critic, token_rewards, turn_level, needs_prompt_values, needs_policy_probs, needs_greedy_baseline
        )
        return fn

    return decorator


ESTIMATOR_CONTRACT = (
    "an advantage estimator is fn(inputs: AdvantageInputs) -> AdvantageOutput (reinforge.algos.types); "
    "decorate it with @register_advantage(name, min_group_size=..., needs_critic=...) to declare what it needs"
)


def get_estimator(name: str) -> EstimatorSpec:
    """A registered estimator by name, or the user's own by import path (`pkg.algos:my_estimator`:
    a function registered with @register_advantage keeps its declared needs; a plain function is
    taken with the defaults: groups of any size, no critic)."""
    if is_import_path(name):
        fn = load_object(name)
        if isinstance(fn, EstimatorSpec):
            return fn
        registered = next((spec for spec in ADVANTAGE_ESTIMATORS.values() if spec.fn is fn), None)
        if registered is not None:
            return registered
        if inspect.isclass(fn):  # calling it would build an instance, not return advantages
            raise ValueError(f"{name} is a class; {ESTIMATOR_CONTRACT}")
        check_call(fn, (None,), {}, name, ESTIMATOR_CONTRACT)
        return EstimatorSpec(name, fn, min_group_size=1, needs_critic=False)
    if name not in ADVANTAGE_ESTIMATORS:
        raise ValueError(
            f"unknown advantage estimator {name!r}; built-in: {', '.join(sorted(ADVANTAGE_ESTIMATORS))}; "
            "or your own as 'package.module:name' or './file.py:name'"
        )
    return ADVANTAGE_ESTIMATORS[name]
