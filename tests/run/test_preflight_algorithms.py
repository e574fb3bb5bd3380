"""Preflight of the algorithm section: unknown names list the valid ones, and combinations that
cannot work are refused with the reason, before any model is built."""

from __future__ import annotations

import pytest

from reinforge.algos.methods import METHODS
from reinforge.config import ConfigError, load_config
from reinforge.run.preflight import preflight


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        preflight(load_config("default", list(overrides)))
    return str(err.value)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_named_method_passes_preflight_on_the_default_recipe(method):
    preflight(load_config("default", [f"algo.method={method}"]))


@pytest.mark.parametrize(
    ("key", "valid"),
    [("algo.policy_loss", "cispo"), ("algo.loss_agg", "seq_mean_token_mean"), ("algo.advantage", "reinforce_pp"), ("critic.loss", "hl_gauss")],
)
def test_unknown_names_list_the_valid_ones(key, valid):
    extra = ["algo.method=ppo"] if key == "critic.loss" else []
    message = refused(*extra, f"{key}=nope")
    assert key in message and valid in message


def test_gae_without_a_critic_is_refused():
    assert "critic.enabled=true" in refused("algo.advantage=gae")


def test_a_critic_no_estimator_uses_is_refused():
    assert "does not use a critic" in refused("critic.enabled=true")


def test_gspo_needs_sequence_level_aggregation():
    message = refused("algo.policy_loss=gspo", "algo.loss_agg=token_mean")
    assert "seq_mean_token_mean" in message and "sequence-level" in message


@pytest.mark.parametrize("method", ["rloo", "dr_grpo", "gdpo", "pass_at_k"])
def test_group_estimators_refuse_groups_of_one(method):
    assert "rollout.group_size=1" in refused(f"algo.method={method}", "rollout.group_size=1")


def test_pass_k_above_the_group_size():
    assert "pass_k=16" in refused("algo.method=pass_at_k", "algo.pass_k=16", "rollout.group_size=8")


def test_kl_in_reward_without_a_coefficient():
    assert "kl_coef" in refused("algo.kl_in_reward=true")


def test_reference_reset_without_a_reference():
    assert "ref_reset_every" in refused("algo.ref_reset_every=10")


def test_critic_support_must_be_ordered():
    assert "critic.support" in refused("algo.method=ppo", "critic.loss=hl_gauss", "critic.support=[1.0, -1.0]")


def test_token_budget_beyond_the_context_is_refused():
    message = refused("model.max_positions=32", "rollout.max_new_tokens=40")
    assert "model.max_positions" in message and "40" in message


def test_prompt_plus_budget_beyond_the_context_is_refused():
    from reinforge.run.preflight import check_prompt_lengths

    check_prompt_lengths([10, 20], 12, context=32)
    with pytest.raises(ConfigError, match="longest prompt \\(21 tokens\\)"):
        check_prompt_lengths([10, 21], 12, context=32)
