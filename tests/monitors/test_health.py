"""The trainer's side of the monitors: what is logged, when a detector acts (its onset only), the
stop verdict, and the per-step group-diversity metrics that the mode-collapse detector reads."""

from __future__ import annotations

from histories import steps

from reinforge.config import load_config
from reinforge.rollout.trajectory import single_turn_trajectory
from reinforge.trainer.group_diversity import group_diversity_metrics
from reinforge.trainer.health import HealthMonitor, fired_before


def run(monitor: HealthMonitor, rows: list[dict]) -> list:
    """Feed `rows` step by step as the RL loop does; the verdict of each step."""
    history, verdicts = [], []
    for row in rows:
        history.append(dict(row))
        verdict = monitor.check(history, [])
        history[-1].update(verdict.metrics)
        verdicts.append(verdict)
    return verdicts


def test_a_detector_acts_at_its_onset_only() -> None:
    cfg = load_config("default", ["monitor.window=2", "monitor.action=checkpoint"])
    # zero-variance share over the last 2 steps: -, 0.75, 1, 0.5, 0.5, 1, 1 -> fires (> 0.9) at steps 3, 6, 7
    rows = steps(7, zero_variance_group_frac=[0.5, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    verdicts = run(HealthMonitor(cfg), rows)
    fired = [v.metrics.get("monitor/zero_variance") for v in verdicts]
    assert fired == [None, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0]  # no reading at step 1 (window 2)
    assert [v.metrics.get("monitor/zero_variance/value") for v in verdicts] == [None, 0.75, 1.0, 0.5, 0.5, 1.0, 1.0]
    # acts when it starts firing (3, 6), not while it goes on firing (7)
    assert [v.action for v in verdicts] == [None, None, "checkpoint", None, None, "checkpoint", None]
    assert "monitor/stop" not in verdicts[2].metrics


def test_a_stop_verdict_says_which_detector() -> None:
    cfg = load_config("default", ["monitor.window=2", "monitor.action=stop"])
    verdicts = run(HealthMonitor(cfg), steps(2, zero_variance_group_frac=1.0, identical_response_group_frac=1.0))
    last = verdicts[-1]
    assert last.action == "stop" and last.metrics["monitor/stop"] == 1.0
    assert {r.name for r in last.onsets} == {"mode_collapse", "zero_variance"}
    assert last.stop_reason(2) == "the training-health monitor mode_collapse, zero_variance fired at RL step 2 (monitor.action=stop)"


def test_switches() -> None:
    rows = steps(2, zero_variance_group_frac=1.0, identical_response_group_frac=1.0)
    off = run(HealthMonitor(load_config("default", ["monitor.window=2", "monitor.enabled=false"])), rows)
    assert all(v.metrics == {} for v in off)
    one_off = run(HealthMonitor(load_config("default", ["monitor.window=2", "monitor.zero_variance.enabled=false"])), rows)
    assert "monitor/zero_variance" not in one_off[-1].metrics and one_off[-1].metrics["monitor/mode_collapse"] == 1.0


def test_fired_before_reads_the_last_step_that_read_the_detector() -> None:
    # reward hacking is read at evaluation steps only: the step between does not reset it
    history = [{"monitor/reward_hacking": 1.0}, {}, {}]
    assert fired_before(history, "reward_hacking") and not fired_before(history, "mode_collapse")
    assert not fired_before([{"monitor/reward_hacking": 1.0}, {"monitor/reward_hacking": 0.0}], "reward_hacking")


def episode(group: int, tokens: list[int]):
    return single_turn_trajectory("t", [1, 2], tokens, [-0.1] * len(tokens), "x", group_id=group)


def test_group_diversity_by_hand() -> None:
    trajectories = [
        episode(0, [5, 6]), episode(0, [5, 6]), episode(0, [5, 6]),  # all the same: identical and duplicate
        episode(1, [5, 6]), episode(1, [5, 7]), episode(1, [5, 6]),  # two alike: duplicate only
        episode(2, [5]), episode(2, [5, 6]), episode(2, [6, 5]),  # all different
        episode(3, [9]),  # a lone response: not counted
    ]
    # 3 groups of >= 2: duplicate in 2 of them, identical in 1
    assert group_diversity_metrics(trajectories) == {"duplicate_response_group_frac": 2 / 3, "identical_response_group_frac": 1 / 3}
    assert group_diversity_metrics([episode(0, [1])]) == {}
