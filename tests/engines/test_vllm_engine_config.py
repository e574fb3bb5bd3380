"""engine.type=vllm in the default suite: preflight before any model is loaded, and what build_engine
hands VllmEngine; needs no vLLM (its presence and the engine are faked)."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.engines import vllm_engine
from reinforge.engines.vllm_engine import row_seed
from reinforge.run.pipeline import build_engine
from reinforge.run.preflight import check_engine


def check(*overrides: str) -> None:
    check_engine(load_config("default", list(overrides)), None)


def test_torch_engine_needs_no_check(monkeypatch) -> None:
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: pytest.fail("the torch engine must not look for vLLM"))
    check()


def test_vllm_without_the_extra_names_the_install(monkeypatch) -> None:
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: False)
    with pytest.raises(ConfigError) as err:
        check("engine.type=vllm")
    assert "engine.type=vllm" in str(err.value) and "pip install 'reinforge[vllm]'" in str(err.value)


def test_unknown_engine_type_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        load_config("default", ["engine.type=sglang"])
    assert "engine.type" in str(err.value) and "'torch' or 'vllm'" in str(err.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer.partial_rollouts=true", "trainer.max_staleness=1", "algo.tis_cap=2"],
        ["trainer.schedule=async", "trainer.max_staleness=2", "algo.tis_cap=2"],
        ["trainer.schedule=async", "trainer.partial_rollouts=true", "trainer.max_staleness=2", "algo.tis_cap=2"],
        ["workers.workers=2"],
    ],
)
def test_async_partial_rollouts_and_ray_workers_pass_the_engine_check_on_vllm(monkeypatch, overrides: list[str]) -> None:
    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_engine, "unsupported_model_reason", lambda config: None)
    check("engine.type=vllm", *overrides)


def test_a_model_vllm_cannot_serve_is_named_with_the_reason(monkeypatch) -> None:
    seen = []

    def refuse(config: dict) -> str:
        seen.append(config)
        return "head dimension 16 is not one vLLM's CPU attention supports"

    monkeypatch.setattr(vllm_engine, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_engine, "unsupported_model_reason", refuse)
    with pytest.raises(ConfigError) as err:
        check("engine.type=vllm", "model.preset=nano")
    assert "model.preset=nano" in str(err.value) and "head dimension 16" in str(err.value)
    # what the check sees is the preset's own shape: nano is hidden 64 over 4 heads
    assert seen == [{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_attention_heads": 4}]


def test_row_seeds_differ_per_row_and_repeat_per_call() -> None:
    seeds = [row_seed(7, i) for i in range(64)]
    assert len(set(seeds)) == 64 and all(0 <= s < 2**63 for s in seeds)
    assert seeds == [row_seed(7, i) for i in range(64)]
    assert seeds != [row_seed(8, i) for i in range(64)]
    assert row_seed(None, 3) is None


@pytest.mark.parametrize(
    "overrides, truncation",
    [([], False), (["rollout.top_k=5"], True), (["rollout.top_p=0.9", "rollout.temperature=0.7"], True)],
)
def test_build_engine_starts_vllm_from_the_config(monkeypatch, overrides: list[str], truncation: bool) -> None:
    started = []
    monkeypatch.setattr(vllm_engine, "VllmEngine", lambda *args, **kwargs: started.append((args, kwargs)) or "vllm")
    cfg = load_config("default", ["engine.type=vllm", "engine.kv_cache_gib=2", "engine.timeout_s=30", "rollout.engine_dtype=bfloat16", *overrides])
    assert build_engine(cfg, "the model", 0) == "vllm"
    assert started == [
        (
            ("the model", 0),
            dict(dtype="bfloat16", truncation=truncation, kv_cache_gib=2, startup_timeout_s=600.0, timeout_s=30.0, enforce_eager=True, threads=1),
        )
    ]


def test_build_engine_starts_ray_workers_that_sample_with_vllm(monkeypatch) -> None:
    from reinforge.distributed import ray_engine

    started = []
    monkeypatch.setattr(ray_engine, "RayEngine", lambda *args, **kwargs: started.append((args, kwargs)) or "ray")
    monkeypatch.setattr(vllm_engine, "VllmEngine", lambda *args, **kwargs: pytest.fail("vLLM runs in the workers, not here"))
    cfg = load_config("default", ["engine.type=vllm", "engine.timeout_s=30", "workers.workers=2", "rollout.top_k=5"])
    assert build_engine(cfg, "the model", 0) == "ray"
    (args, kwargs), = started
    assert args == ("the model", 0, 2) and kwargs["gpus_per_worker"] == 0.0
    assert kwargs["vllm"] == dict(truncation=True, kv_cache_gib=1, startup_timeout_s=600.0, timeout_s=30.0, enforce_eager=True, threads=1)
