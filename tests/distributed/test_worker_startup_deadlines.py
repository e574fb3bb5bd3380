"""A fresh Ray worker's first call waits the start-up deadline, every later call the call deadline
(workers.startup_timeout_s vs workers.timeout_s): a tight call deadline must not fail a slow start."""

from __future__ import annotations

import pytest

from reinforge.config import load_config
from reinforge.distributed.ray_engine import RayEngine, WorkerTimeoutError


class FakeRay:
    """`ray.wait` that records its timeout; `late` refs are never ready."""

    def __init__(self):
        self.timeouts: list[float] = []
        self.late: set[str] = set()

    def wait(self, refs, num_returns, timeout):
        self.timeouts.append(timeout)
        return [r for r in refs if r not in self.late], [r for r in refs if r in self.late]

    def kill(self, actor, no_restart=True):
        pass


def engine_with(fake: FakeRay, timeout_s: float, startup_timeout_s: float) -> RayEngine:
    engine = RayEngine.__new__(RayEngine)  # the deadline logic only: no cluster
    engine.ray, engine.timeout_s, engine.startup_timeout_s = fake, timeout_s, startup_timeout_s
    engine._starting, engine._needs_weights, engine._actors = {0, 1}, set(), ["a0", "a1"]
    engine._spawn = lambda: "fresh"
    engine._capacity_hint = lambda: ""
    return engine


def test_first_calls_get_the_start_up_deadline_later_calls_the_call_deadline() -> None:
    fake = FakeRay()
    engine = engine_with(fake, timeout_s=2, startup_timeout_s=600)
    engine._wait({0: "r0", 1: "r1"}, "weight sync")  # both fresh: the start
    engine._wait({0: "r2", 1: "r3"}, "generate")
    assert fake.timeouts == [600, 2]
    fake.late = {"r4"}
    with pytest.raises(WorkerTimeoutError, match=r"did not finish generate within 2 s \(workers.timeout_s\)"):
        engine._wait({0: "r4"}, "generate")
    assert engine._starting == {0} and engine._actors[0] == "fresh"  # its replacement starts again
    with pytest.raises(WorkerTimeoutError, match=r"within 600 s \(workers.startup_timeout_s\)"):
        engine._wait({0: "r4"}, "loading the current weights")
    assert fake.timeouts[-1] == 600


def test_the_config_key_reaches_every_kind_of_worker(monkeypatch) -> None:
    import reinforge.distributed.ray_engine as ray_engine
    import reinforge.distributed.ray_rewards as ray_rewards
    from reinforge.run import pipeline

    built: list = []
    monkeypatch.setattr(ray_engine, "RayEngine", lambda *a, **kw: built.append(kw))
    monkeypatch.setattr(ray_rewards, "build_ray_scorer", lambda *a, **kw: built.append(kw))
    cfg = load_config("default", ["workers.workers=1", "workers.reward_workers=1", "workers.timeout_s=30",
                                  "workers.startup_timeout_s=900"])
    pipeline.build_engine(cfg, None, 0)
    pipeline.build_scorer(cfg)
    assert built[0]["timeout_s"] == 30 and built[0]["startup_timeout_s"] == 900
    assert built[1]["call_timeout_s"] == cfg.reward.timeout_s and built[1]["start_timeout_s"] == 900
    unset = load_config("default", ["workers.reward_workers=1", "workers.timeout_s=30"])
    pipeline.build_scorer(unset)
    assert built[2]["start_timeout_s"] == 30  # unset: workers.timeout_s, as before
