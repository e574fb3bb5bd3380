"""V0.5: the group's mean reward shrunk toward a value model's predicted pass rate, as the baseline."""

from __future__ import annotations

import torch

from reinforge.algos.advantages.registry import register_advantage
from reinforge.algos.advantages.group_stats import OUTPUT_DTYPE, group_stats, sample_metrics
from reinforge.algos.types import AdvantageInputs, AdvantageOutput


def shrinkage_baseline(
    group_mean: torch.Tensor, group_size: torch.Tensor, prior: torch.Tensor, prior_var: torch.Tensor, test_z: float | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per group [G]: the baseline b, the prior's weight w, and whether the prior was rejected.

        sigma^2 = p (1 - p)                       the reward's variance if the prior p is right
        w = (sigma^2 / n) / (sigma^2 / n + tau^2)  the inverse-variance (posterior-mean) weight
        w = 0  if  |r_bar - p| > z sqrt(sigma^2 / n + tau^2)   (the prior fails the deviation test)
        b = w p + (1 - w) r_bar
    """
    noise = prior * (1 - prior) / group_size
    weight = noise / (noise + prior_var)
    rejected = torch.zeros_like(weight, dtype=torch.bool)
    if test_z is not None:
        rejected = (group_mean - prior).abs() > test_z * (noise + prior_var).sqrt()
        weight = torch.where(rejected, torch.zeros_like(weight), weight)
    return weight * prior + (1 - weight) * group_mean, weight, rejected


@register_advantage("v05_prior", min_group_size=1, needs_prompt_values=True)
def value_prior_advantages(inputs: AdvantageInputs) -> AdvantageOutput:
    """V0.5 baseline (Zhang et al., "V0.5: Generalist Value Model as a Prior for Sparse RL Rollouts",
    2026, arXiv:2603.10848), one advantage per sample [N]:

        A_i = r_i - b_g(i),   b_g = w_g p_g + (1 - w_g) r_bar_g,
        w_g = (sigma_g^2 / n_g) / (sigma_g^2 / n_g + tau^2),   sigma_g^2 = p_g (1 - p_g)

    with p_g the value model's pass rate predicted for the group's prompt before sampling
    (inputs.prompt_values), r_bar_g the group's mean reward over its n_g samples, and tau^2 the prior's
    error variance (inputs.prompt_value_var; the trainer estimates it from the value model's recent
    squared error less the binomial noise, reinforge.values.value_model.prior_variance). w is the
    weight that minimizes the baseline's mean squared error when r_bar is unbiased with variance
    sigma^2 / n and p is off by an error of variance tau^2 (the posterior mean of a normal prior):
    small groups lean on the prior, large ones on their own mean. As in V0.5, a prior that the group
    contradicts is not trusted: when |r_bar - p| > z sqrt(sigma^2 / n + tau^2) (inputs.prior_test_z,
    None disables) the group keeps its empirical mean (w = 0). V0.5 then also samples more rollouts for
    such a group (its dynamic budget allocation); that half is not done here.

    No division by the group's std (as Dr. GRPO). Unlike group-mean estimators, a group whose rewards are
    all equal gets a non-zero advantage r - b where the prior disagrees with it: the signal V0.5 takes
    from sparse groups. The prior is on the reward's scale only for a 0/1 reward, which the trainer
    checks before compute.
    """
    if inputs.prompt_values is None or inputs.prompt_value_var is None:
        raise ValueError("v05_prior needs inputs.prompt_values and inputs.prompt_value_var (the prompt-value model's prior)")
    stats = group_stats(inputs.rewards, inputs.group_ids, min_group_size=1, estimator="v05_prior")
    num_groups = stats.counts.numel()
    # A group's samples share one prompt, so one prediction: the first sample's stands for it.
    first = torch.full((num_groups,), -1, dtype=torch.long)
    first.scatter_reduce_(0, stats.index, torch.arange(len(stats.index)), "amin", include_self=False)
    prior = inputs.prompt_values.double()[first].clamp(0.0, 1.0)
    prior_var = inputs.prompt_value_var.double()[first]
    baseline, weight, rejected = shrinkage_baseline(stats.means, stats.counts, prior, prior_var, inputs.prior_test_z)
    advantages = inputs.rewards.double() - baseline[stats.index]
    metrics = {
        **sample_metrics(advantages, stats),
        "prior_weight_mean": weight.mean().item(),
        "prior_rejected_frac": rejected.double().mean().item(),
    }
    return AdvantageOutput(advantages.to(OUTPUT_DTYPE), metrics=metrics)
