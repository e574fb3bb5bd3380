"""workers.sharding=fsdp: settings refused before compute, with what to set, and the ones accepted."""

from __future__ import annotations

import copy
import types

import pytest
import torch

from reinforge.cli import main
from reinforge.config import ConfigError, load_config
from reinforge.run import pipeline, preflight


def test_sharding_defaults_to_none_and_fsdp_needs_two_learners(capsys: pytest.CaptureFixture[str]) -> None:
    assert load_config("default", []).workers.sharding == "none"
    with pytest.raises(ConfigError, match=r"workers.sharding=fsdp .* workers.learners=1: set workers.learners to 2 or more"):
        preflight.preflight(load_config("default", ["workers.sharding=fsdp"]))
    preflight.preflight(load_config("default", ["workers.sharding=fsdp", "workers.learners=2"]))
    assert main(["config", "validate", "workers.sharding=zero3"]) == 2
    assert "workers.sharding" in capsys.readouterr().err


@pytest.mark.parametrize(("override", "message"), [
    ("algo.compile_forward=true", "algo.compile_forward is not supported"),
])
def test_unsupported_combinations_are_refused(override: str, message: str) -> None:
    cfg = load_config("default", ["workers.sharding=fsdp", "workers.learners=2", override])
    with pytest.raises(ConfigError, match=message):
        preflight.preflight(cfg)


@pytest.mark.parametrize("overrides", [["model.lora.r=4"], ["critic.enabled=true", "algo.advantage=gae"]])
def test_lora_and_a_critic_are_accepted(overrides: list[str]) -> None:
    preflight.preflight(load_config("default", ["workers.sharding=fsdp", "workers.learners=2", *overrides]))


class LayerlessLM(torch.nn.Module):
    """A causal LM whose blocks sit where FSDP looks for none (no base_model.layers / .h / ...)."""

    def __init__(self):
        super().__init__()
        self.stack = torch.nn.Sequential(torch.nn.Linear(4, 4))
        self.config = types.SimpleNamespace()


def test_a_model_whose_layers_cannot_be_found_is_refused_before_any_learner_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    started = []
    monkeypatch.setattr("reinforge.distributed.learner_group.LearnerGroup.__init__", lambda *a, **k: started.append(a))
    cfg = load_config("default", ["workers.sharding=fsdp", "workers.learners=2"])
    with pytest.raises(ConfigError, match=r"cannot find the decoder layers of LayerlessLM .* set workers.sharding=none"):
        pipeline.build_learners(cfg, {"policy": LayerlessLM()}, types.SimpleNamespace(max_turns=1))
    assert not started


def test_the_decoder_layers_of_a_lora_model_are_found_under_peft(nano_model) -> None:
    """peft wraps the model twice (PeftModel -> LoraModel -> the causal LM): FSDP shards the same layers."""
    pytest.importorskip("peft")
    from reinforge.config import LoraConfig
    from reinforge.distributed.fsdp import decoder_layers
    from reinforge.models.lora import apply_lora

    model = apply_lora(copy.deepcopy(nano_model), LoraConfig(r=4), seed=0)
    assert decoder_layers(model) is model.base_model.model.model.layers
