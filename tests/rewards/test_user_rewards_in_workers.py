"""A user's reward named by import path runs where a built-in one runs (a worker process by
default) and fails the same way: a raise, a hang or a non-number is counted against its component
with its reason, next to a built-in component that keeps scoring; a reward the worker processes
cannot import stops the run at its start, with the import error, leaving no process behind."""

from __future__ import annotations

import os
import sys
import types

import pytest

from reinforge.config import ConfigError, load_config
from reinforge.rewards.builtin import build_component
from reinforge.rewards.process_pool import ProcessCallPool
from reinforge.rewards.scorer import NamedReward, RewardScorer
from reinforge.rollout.trajectory import single_turn_trajectory
from reinforge.tasks.task import Task
from reinforge.run.pipeline import start_scorer
from user_code import user_project  # noqa: F401 - fixture

TASKS = {"sum": Task(id="sum", prompt="2+3=", answer="5")}

MOODY = """
    import math
    import os
    import time


    def moody(task, trajectory, scale=1.0):
        text = trajectory.response_text
        if text == "raise":
            raise ValueError("this reward refuses the word 'raise'")
        if text == "hang":
            time.sleep(3600)
        outputs = {"none": None, "word": "high", "nan": math.nan, "inf": math.inf, "numpy": _numpy_half()}
        if text in outputs:
            return outputs[text]
        return scale * len(text)


    def _numpy_half():
        import numpy

        return numpy.float32(0.5)


    def where(task, trajectory):
        return float(os.getpid())
"""


def traj(response: str, group_id: int = 0):
    return single_turn_trajectory("sum", [1, 2], [3, 4], [-0.5, -0.5], response, "stop", group_id)


def user_scorer(path: str, **limits) -> RewardScorer:
    """The scorer `build_scorer` makes: a user's reward by import path beside the built-in verifier."""
    components = []
    for name, fn, params in [("mine", path, {"scale": 2.0}), ("correct", "verifier", {})]:
        built, group = build_component(fn, params)
        components.append(NamedReward(name, built, 1.0, group=group, spec=(fn, params)))
    return RewardScorer(components, **limits)


@pytest.mark.parametrize("spelling", ["module", "file"])
def test_a_user_reward_runs_in_a_worker_process_and_its_failures_are_counted_like_a_builtin(user_project, spelling) -> None:
    user_project.write("uw_moody_rewards.py", MOODY)
    path = "uw_moody_rewards:moody" if spelling == "module" else f"{user_project.dir / 'uw_moody_rewards.py'}:moody"
    scorer = user_scorer(path, isolation="process", workers=2, timeout_s=1.0, max_error_fraction=1.0)
    try:
        scorer.start()
        responses = ["5", "raise", "hang", "none", "word", "nan", "inf", "numpy", "55"]
        batch = [traj(r, group_id=i) for i, r in enumerate(responses)]
        metrics = scorer.score(TASKS, batch)
        failures = {t.response_text: t.reward_failures for t in batch}
    finally:
        scorer.close()
    assert failures == {
        "5": {}, "numpy": {}, "55": {},
        "raise": {"mine": "raised"}, "hang": {"mine": "timeout"},
        "none": {"mine": "not_a_number"}, "word": {"mine": "not_a_number"},
        "nan": {"mine": "not_a_number"}, "inf": {"mine": "not_a_number"},
    }
    scores = {t.response_text: t.rewards for t in batch}
    assert scores["5"] == {"mine": 2.0, "correct": 1.0} and scores["55"] == {"mine": 4.0, "correct": 0.0}
    assert scores["numpy"]["mine"] == 0.5  # a numpy number is a number
    assert scores["nan"] == {"mine": 0.0, "correct": 0.0}  # the fallback, and the sample is left out
    assert metrics["reward_failed/mine/not_a_number"] == 4.0
    assert metrics["reward_failed/mine/raised"] == 1.0 and metrics["reward_failed/mine/timeout"] == 1.0
    assert not any(k.startswith("reward_failed/correct") for k in metrics)  # the built-in one scored every sample
    assert metrics["reward/mine/mean"] == pytest.approx((2.0 + 0.5 + 4.0) / 3)  # over the scored samples only
    nan_errors = next(t.errors for t in batch if t.response_text == "nan")
    assert nan_errors == ["reward mine: RewardNotANumber: it returned nan, not a finite number"]
    word_errors = next(t.errors for t in batch if t.response_text == "word")
    assert "it returned str 'high', not a number" in word_errors[0]


def test_a_non_number_is_counted_in_threads_too(user_project) -> None:
    user_project.write("uw_moody_threads.py", MOODY)
    scorer = user_scorer("uw_moody_threads:moody", isolation="thread", max_error_fraction=1.0)
    try:
        batch = [traj("inf"), traj("5")]
        metrics = scorer.score(TASKS, batch)
    finally:
        scorer.close()
    assert [t.reward_failures for t in batch] == [{"mine": "not_a_number"}, {}]
    assert metrics["reward_failed/mine/not_a_number"] == 1.0


GROUP = """
    import math

    from reinforge.rewards.user_rewards import group_reward


    @group_reward
    def spread(task, trajectories):
        first = trajectories[0].response_text
        if first == "scalar":
            return 1.0
        if first == "nan":
            return [math.nan] + [1.0] * (len(trajectories) - 1)
        return [float(i) for i in range(len(trajectories))]
"""


def test_a_group_reward_with_a_non_number_fails_its_whole_group(user_project) -> None:
    user_project.write("uw_group_rewards.py", GROUP)
    built, group = build_component("uw_group_rewards:spread", {})
    assert group
    scorer = RewardScorer([NamedReward("spread", built, 1.0, group=True, spec=("uw_group_rewards:spread", {}))],
                          isolation="process", workers=1, max_error_fraction=1.0)
    try:
        batch = [traj(text, group_id=g) for g, texts in enumerate((["scalar", "a"], ["nan", "b"], ["ok", "c"])) for text in texts]
        metrics = scorer.score(TASKS, batch)
    finally:
        scorer.close()
    assert [t.reward_failures for t in batch] == [{"spread": "not_a_number"}] * 4 + [{}, {}]
    assert [t.rewards["spread"] for t in batch[4:]] == [0.0, 1.0]
    assert metrics["reward_failed/spread/not_a_number"] == 4.0
    assert "returned float 1.0 where one score per sample (a list of 2) is expected" in batch[0].errors[0]
    assert "its score 0 returned nan, not a finite number" in batch[2].errors[0]


def test_the_user_reward_really_runs_in_the_worker_processes(user_project) -> None:
    user_project.write("uw_where_rewards.py", MOODY)
    fn, _ = build_component("uw_where_rewards:where", {})
    scorer = RewardScorer([NamedReward("pid", fn, 1.0, spec=("uw_where_rewards:where", {}))], isolation="process", workers=2)
    try:
        scorer.start()
        workers = set(scorer.worker_pids())
        batch = [traj(str(i), group_id=i) for i in range(8)]
        scorer.score(TASKS, batch)
    finally:
        scorer.close()
    assert {int(t.rewards["pid"]) for t in batch} <= workers and os.getpid() not in workers


TRAINER_ONLY = """
    import trainer_only_dependency  # present in the trainer's process only


    def score(task, trajectory):
        return trainer_only_dependency.VALUE
"""


def test_a_reward_the_workers_cannot_import_stops_the_run_at_start(user_project, monkeypatch) -> None:
    # The trainer has a module the worker processes do not (as with a PYTHONPATH set in a notebook).
    dependency = types.ModuleType("trainer_only_dependency")
    dependency.VALUE = 1.0
    monkeypatch.setitem(sys.modules, "trainer_only_dependency", dependency)
    user_project.write("uw_needs_trainer.py", TRAINER_ONLY)
    cfg = load_config("default", [
        'reward.components=[{name: correct, fn: verifier}, {name: mine, fn: "uw_needs_trainer:score"}]',
        "reward.workers=2",
    ])
    launched: list = []
    original = ProcessCallPool._launch

    def recording_launch(self):
        worker = original(self)
        launched.append(worker.process)
        return worker

    monkeypatch.setattr(ProcessCallPool, "_launch", recording_launch)
    with pytest.raises(ConfigError) as err:
        start_scorer(cfg)
    message = str(err.value)
    assert message.startswith("reward.components[1] (mine): a reward worker process cannot build reward component 'mine'")
    assert "No module named 'trainer_only_dependency'" in message
    assert f"{user_project.dir.resolve() / 'uw_needs_trainer.py'}:2" in message  # the import line
    assert "Traceback" not in message  # the error, not a wall of worker traceback
    assert len(launched) == 2 and all(p.poll() is not None for p in launched)  # both killed and reaped
