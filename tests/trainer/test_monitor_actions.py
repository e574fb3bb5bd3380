"""monitor.action in a real run: `stop` ends the run after the step a detector starts firing
(evaluated, checkpointed, final model saved, exit status 3, the reason logged and printed);
`checkpoint` writes a checkpoint at that step and trains on.

A random nano model never sums right, so with the verifier as the only reward every group's
rewards are equal: the zero-variance detector (window 2) starts firing at step 2.
"""

from __future__ import annotations

import json

from reinforge.cli import MONITOR_STOP_STATUS, main
from reinforge.config import load_config

TINY = [
    "model.preset=nano", "sft.steps=0", "task.train_size=20", "task.eval_size=6", "trainer.steps=4",
    "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=3", "eval.samples=1", "eval.every=25",
    "reward.components=[{name: correct, fn: verifier}]", "telemetry.progress=false", "telemetry.tensorboard=false",
    "trainer.checkpoint_every=0", "monitor.window=2",
]


def rows(run_dir, stage: str) -> list[dict]:
    return [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines()) if r["stage"] == stage]


def test_stop_ends_the_run_with_a_checkpoint_and_says_why(tmp_path, capsys) -> None:
    run_dir = tmp_path / "run"
    status = main(["train", "--output", str(run_dir), *TINY, "monitor.action=stop"])
    assert status == MONITOR_STOP_STATUS == 3
    err = capsys.readouterr().err
    assert "reinforge: WARNING: step 2: zero-variance groups: 1 of the groups" in err and "(threshold 0.9)" in err
    assert "stopping after this step with a checkpoint (monitor.action=stop)" in err
    assert "stopped early: the training-health monitor zero_variance fired at RL step 2 (monitor.action=stop)" in err
    assert [r["step"] for r in rows(run_dir, "rl")] == [1, 2]  # of trainer.steps=4
    assert [r["step"] for r in rows(run_dir, "eval")] == [0, 2]  # the run's final evaluation, at the stop
    health = rows(run_dir, "health")[-1]
    assert health["step"] == 2 and health["monitor/zero_variance"] == 1.0 and health["monitor/stop"] == 1.0
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step_000002"]  # checkpoint_every=0 notwithstanding
    assert (run_dir / "final" / "model.safetensors").is_file()


def test_checkpoint_writes_one_at_the_onset_and_trains_on(tmp_path) -> None:
    from reinforge.run.pipeline import run_training

    cfg = load_config("default", [*TINY, "monitor.action=checkpoint", f"trainer.output_dir={tmp_path / 'run'}"])
    outcome = run_training(cfg)
    assert len(outcome.rl.steps) == 4 and outcome.rl.stop_reason is None
    # fires at steps 2, 3 and 4; acts once, at 2
    assert [s.get("monitor/zero_variance") for s in outcome.rl.steps] == [None, 1.0, 1.0, 1.0]
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["step_000002"]
    # the mode-collapse detector's input is measured every step
    assert all(0.0 <= s["identical_response_group_frac"] <= s["duplicate_response_group_frac"] <= 1.0 for s in outcome.rl.steps)
