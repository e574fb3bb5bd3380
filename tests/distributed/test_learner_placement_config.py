"""workers.learner_placement: which launcher starts learner ranks 1..N-1, and what is refused before compute."""

from __future__ import annotations

import types

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.run import pipeline, preflight


@pytest.mark.parametrize(("overrides", "on_ray"), [
    (["workers.learners=2"], False),  # the default: spawned processes
    (["workers.learners=2", "workers.address=auto"], True),  # a cluster to join: its nodes
    (["workers.learners=2", "workers.address=auto", "workers.learner_placement=processes"], False),
    (["workers.learners=2", "workers.learner_placement=ray"], True),  # a local Ray cluster
    (["workers.address=auto"], False),  # one learner: no rank to place
])
def test_auto_places_ranks_on_ray_when_the_run_joins_a_cluster(overrides, on_ray) -> None:
    assert load_config("default", overrides).workers.learners_on_ray is on_ray


class Started(Exception):
    pass


def test_the_pipeline_starts_the_launcher_the_placement_names(monkeypatch: pytest.MonkeyPatch) -> None:
    started = []

    def recording(self, world_size, spec, models, **kwargs):
        started.append((type(self).__name__, world_size, spec.sharding, kwargs))
        raise Started

    pytest.importorskip("ray")
    from reinforge.distributed.learner_group import LearnerGroup
    from reinforge.distributed.ray_learners import RayLearnerGroup
    from reinforge.models.tiny_llama import build_tiny_llama
    from reinforge.models.tokenizer import train_tokenizer

    monkeypatch.setattr(LearnerGroup, "__init__", recording)
    monkeypatch.setattr(RayLearnerGroup, "__init__", recording)
    models = {"policy": build_tiny_llama(train_tokenizer(["1+2=3", "4+5=9"]), "nano", seed=0)}
    env = types.SimpleNamespace(max_turns=1)
    for overrides in (["workers.address=10.0.0.1:6379", "workers.cpus_per_worker=2"], []):
        with pytest.raises(Started):
            pipeline.build_learners(load_config("default", ["workers.learners=2", *overrides]), models, env)
    assert started == [
        ("RayLearnerGroup", 2, "none", {"address": "10.0.0.1:6379", "cpus_per_rank": 2.0}),
        ("LearnerGroup", 2, "none", {}),
    ]


def test_ray_placement_is_refused_where_it_cannot_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"workers.learner_placement=ray .* workers.learners=1: set workers.learners to 2"):
        preflight.preflight(load_config("default", ["workers.learner_placement=ray"]))
    monkeypatch.setattr(preflight, "ray_available", lambda: False)
    with pytest.raises(ConfigError, match=r"workers.address is set: learner ranks run as Ray actors. Ray is not installed: `pip install .*; or set workers.learner_placement=processes"):
        preflight.preflight(load_config("default", ["workers.learners=2", "workers.address=auto"]))
    preflight.preflight(load_config("default", ["workers.learners=2"]))  # processes: Ray not needed
