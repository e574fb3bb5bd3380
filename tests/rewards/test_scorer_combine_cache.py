"""RewardScorer with combine settings, fallback scores and the score cache; preflight of gates."""

from __future__ import annotations

import threading

import pytest

from reinforge.config import ConfigError, RewardGate, build_config, load_config
from reinforge.rewards.builtin import FormatReward, VerifierReward
from reinforge.rewards.combine import Gate
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.run.pipeline import build_scorer
from reinforge.rollout.trajectory import Trajectory, single_turn_trajectory
from reinforge.tasks.task import Task
from reinforge.run.preflight import preflight

TASKS = {"t0": Task(id="t0", prompt="2+3=", answer="5"), "t1": Task(id="t1", prompt="3+4=", answer="7")}


def traj(task_id: str, response: str, finish_reason: str = "stop") -> Trajectory:
    sampled = [10 + i for i in range(max(1, len(response)))]
    return single_turn_trajectory(task_id, [1, 2, 3], sampled, [-0.5] * len(sampled), response, finish_reason)


class Counting:
    """Counts its calls; deterministic unless told otherwise."""

    def __init__(self, deterministic: bool = True):
        self.deterministic = deterministic
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, task, trajectory) -> float:
        with self._lock:
            self.calls += 1
        return float(len(trajectory.response_text))


def test_repeated_task_and_response_is_scored_once(scorers) -> None:
    counting = Counting()
    scorer = scorers([NamedReward("len", counting, 1.0)], cache=True)
    batch = [traj("t0", "123"), traj("t0", "123"), traj("t0", "45")]
    metrics = scorer.score(TASKS, batch)
    assert counting.calls == 2  # the in-batch duplicate shares one call
    assert [t.reward for t in batch] == [3.0, 3.0, 2.0]
    assert metrics["reward_cache_hit_frac"] == pytest.approx(1 / 3)
    assert metrics["reward_seconds"] >= 0

    again = [traj("t0", "123"), traj("t0", "45")]
    metrics = scorer.score(TASKS, again)
    assert counting.calls == 2  # both seen in the last batch
    assert [t.reward for t in again] == [3.0, 2.0]
    assert metrics["reward_cache_hit_frac"] == 1.0

    scorer.score(TASKS, [traj("t1", "123"), traj("t0", "123", finish_reason="length")])
    assert counting.calls == 4  # other task id; other finish reason


def test_cache_off_and_nondeterministic_fns_are_always_called(scorers) -> None:
    plain, random_like = Counting(), Counting(deterministic=False)
    scorer = scorers([NamedReward("plain", plain, 1.0)], cache=False)
    scorer.score(TASKS, [traj("t0", "1"), traj("t0", "1")])
    assert plain.calls == 2
    scorer = scorers([NamedReward("random", random_like, 1.0)], cache=True)
    metrics = scorer.score(TASKS, [traj("t0", "1"), traj("t0", "1")])
    assert random_like.calls == 2 and metrics["reward_cache_hit_frac"] == 0.0


def test_failures_are_not_cached_and_get_the_fallback(scorers) -> None:
    calls = []

    def flaky(task, trajectory) -> float:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return 1.0

    scorer = scorers([NamedReward("flaky", flaky, 1.0)], cache=True, fallback=-1.0, max_error_fraction=1.0)
    first = [traj("t0", "5")]
    scorer.score(TASKS, first)
    assert first[0].rewards["flaky"] == -1.0 and first[0].reward == -1.0
    assert any("boom" in e for e in first[0].errors)
    second = [traj("t0", "5")]
    scorer.score(TASKS, second)
    assert second[0].reward == 1.0 and len(calls) == 2


def test_timeout_gets_the_fallback(scorers) -> None:
    release = threading.Event()

    def hanging(task, trajectory) -> float:
        release.wait(5)
        return 1.0

    scorer = scorers([NamedReward("slow", hanging, 1.0)], timeout_s=0.2, fallback=-0.5, max_error_fraction=1.0)
    batch = [traj("t0", "5")]
    try:
        scorer.score(TASKS, batch)
    finally:
        release.set()
    assert batch[0].rewards["slow"] == -0.5 and batch[0].reward == -0.5


def test_scorer_combines_with_gates_product_and_clip(scorers) -> None:
    components = [NamedReward("correct", VerifierReward(), 1.0), NamedReward("format", FormatReward(r"\d+"), 0.5)]
    batch = [traj("t0", "5"), traj("t0", "6"), traj("t0", "x")]
    scorers(components, gates=[Gate("format", "correct", 1.0)]).score(TASKS, batch)
    assert [t.reward for t in batch] == [1.5, 0.0, 0.0]
    assert [t.rewards["format"] for t in batch] == [1.0, 1.0, 0.0]  # parts stay ungated for metrics

    batch = [traj("t0", "5"), traj("t0", "6")]
    scorers(components, combine="product").score(TASKS, batch)
    assert [t.reward for t in batch] == [0.5, 0.0]

    batch = [traj("t0", "5")]
    scorers(components, clip=(0.0, 1.0)).score(TASKS, batch)
    assert batch[0].reward == 1.0

    with pytest.raises(ValueError, match="unknown component 'nope'"):
        RewardScorer(components, gates=[Gate("nope", "correct", 1.0)])


def test_build_scorer_passes_the_reward_config() -> None:
    cfg = load_config(
        "default",
        ["reward.combine=product", "reward.fallback=-1", "reward.cache=false", "reward.clip=[-1, 1]"],
    )
    cfg.reward.gates = [RewardGate(part="format", requires="correct", threshold=1.0)]
    scorer = build_scorer(cfg)
    try:
        assert scorer.combine_mode == "product" and scorer.fallback == -1.0 and scorer.cache_enabled is False
        assert scorer.clip == (-1.0, 1.0) and scorer.gates[0].part == "format"
    finally:
        scorer.close()
    assert build_scorer(load_config("default")).cache_enabled is True


def test_build_scorer_isolates_by_name_and_drops_failures_by_default() -> None:
    default = build_scorer(load_config("default"))
    try:
        assert (default.isolation, default.on_error) == ("process", "drop")
        # The workers build each component from its config name and params, not from a pickle.
        assert [c.spec for c in default.components] == [(c.fn, c.params) for c in load_config("default").reward.components]
    finally:
        default.close()
    other = build_scorer(load_config("default", ["reward.isolation=thread", "reward.on_error=fallback"]))
    assert (other.isolation, other.on_error, other._processes) == ("thread", "fallback", None)
    other.close()


def test_config_rejects_a_reversed_clip() -> None:
    with pytest.raises(ConfigError, match="clip"):
        build_config({"reward": {"clip": [1.0, 0.0]}})


@pytest.mark.parametrize("gate, key", [({"part": "styel", "requires": "correct"}, "part"), ({"part": "format", "requires": "corect"}, "requires")])
def test_preflight_names_the_bad_gate_key(gate, key, monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config("default")
    cfg.reward.gates = [RewardGate(threshold=1.0, **gate)]
    with pytest.raises(ConfigError, match=rf"reward\.gates\[0\]\.{key}="):
        preflight(cfg)
