"""The `workers` section: --workers on the command line, the pre-compute check, the engine choice."""

from __future__ import annotations

import pytest

from reinforge.cli import _parser, config_from_args, main
from reinforge.config import load_config
from reinforge.engines.torch_engine import TorchEngine
from reinforge.run import pipeline, preflight


def test_workers_and_learners_flags_set_the_config_keys() -> None:
    args = _parser().parse_args(["train", "--workers", "3", "--learners", "2", "trainer.steps=1"])
    cfg = config_from_args(args)
    assert (cfg.workers.workers, cfg.workers.learners, cfg.trainer.steps) == (3, 2, 1)
    default = config_from_args(_parser().parse_args(["train"])).workers
    assert (default.workers, default.learners) == (0, 1)  # in-process by default


def test_learners_need_a_sequence_each_per_mini_batch() -> None:
    from reinforge.config import ConfigError

    overrides = ["rollout.prompts_per_step=2", "rollout.group_size=2", "algo.mini_batches=2"]
    with pytest.raises(ConfigError, match="workers.learners=3 .* a mini-batch holds 2"):
        preflight.preflight(load_config("default", [*overrides, "workers.learners=3"]))
    preflight.preflight(load_config("default", [*overrides, "workers.learners=2"]))


def test_validate_reports_workers_without_ray(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(preflight, "ray_available", lambda: False)
    assert main(["config", "validate", "workers.workers=2"]) == 2
    err = capsys.readouterr().err
    assert "workers.workers=2" in err and "pip install reinforge[ray]" in err
    assert main(["config", "validate", "workers.workers=0"]) == 0  # in-process needs no Ray


def test_the_pipeline_builds_a_ray_engine_only_with_workers(monkeypatch: pytest.MonkeyPatch, nano_model, tokenizer) -> None:
    built: list[tuple] = []

    class FakeRayEngine:
        def __init__(self, *args, **kwargs):
            built.append((args, kwargs))

    import reinforge.distributed.ray_engine as ray_engine

    monkeypatch.setattr(ray_engine, "RayEngine", FakeRayEngine)
    assert isinstance(pipeline.build_engine(load_config("default"), nano_model, tokenizer.pad_token_id), TorchEngine)
    cfg = load_config("default", ["workers.workers=2", "workers.timeout_s=30", "workers.address=auto"])
    assert isinstance(pipeline.build_engine(cfg, nano_model, tokenizer.pad_token_id), FakeRayEngine)
    (args, kwargs), = built
    assert args[2] == 2 and kwargs["timeout_s"] == 30 and kwargs["address"] == "auto"


def test_workers_count_is_validated() -> None:
    from reinforge.config import ConfigError

    with pytest.raises(ConfigError, match="workers.workers"):
        load_config("default", ["workers.workers=-1"])


def test_the_pipeline_puts_reward_calls_on_ray_only_with_reward_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    import reinforge.distributed.ray_rewards as ray_rewards
    from reinforge.rewards.scorer import RewardScorer

    calls: list[tuple] = []
    monkeypatch.setattr(ray_rewards, "build_ray_scorer", lambda *args, **kwargs: calls.append((args, kwargs)) or "ray scorer")
    local = pipeline.build_scorer(load_config("default"))
    assert type(local) is RewardScorer and not calls
    local.close()
    assert pipeline.build_scorer(load_config("default", ["workers.reward_workers=3", "reward.timeout_s=7"])) == "ray scorer"
    (args, kwargs), = calls
    assert [c[0] for c in args[0]] == ["correct", "format"] and args[1] == 3
    assert kwargs["call_timeout_s"] == 7 and kwargs["timeout_s"] == 7 and kwargs["cache"] is True
