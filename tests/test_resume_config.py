"""`reinforge train --resume DIR [--force] KEY=VALUE`: the config a resumed run gets, before any compute.

The run continues in the directory named; a change the checkpoint would silently undo is refused
even with --force, with the reason; every other forced change is accepted (and applied, see
tests/runtime/test_resume_changes.py and tests/run/test_exact_resume.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reinforge.cli import main
from reinforge.config import ConfigError, dump_config, load_config
from reinforge.config_resume import resume_config


def make_run(where: Path, written_at: Path, *overrides: str, checkpoint: bool = True) -> Path:
    """A run directory whose config.yaml was written when the run lived at `written_at`."""
    cfg = load_config("default", [f"trainer.output_dir={written_at}", *overrides])
    where.mkdir(parents=True)
    (where / "config.yaml").write_text(dump_config(cfg))
    if checkpoint:
        (where / "checkpoints" / "step_000002").mkdir(parents=True)
    return where


def test_a_copied_or_moved_run_resumes_in_the_directory_named(tmp_path: Path) -> None:
    run = make_run(tmp_path / "copy", written_at=tmp_path / "original")  # the original may be gone (moved)
    cfg = resume_config(str(run))  # the other directory in config.yaml is no config change
    assert cfg.trainer.output_dir == str(run)


def test_the_output_dir_cannot_be_overridden_on_resume(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", written_at=tmp_path / "run")
    with pytest.raises(ConfigError, match="trainer.output_dir cannot change on resume.*copy the run directory"):
        resume_config(str(run), [f"trainer.output_dir={tmp_path / 'elsewhere'}"], force=True)


@pytest.mark.parametrize(
    "override, reason",
    [
        ("model.preset=nano", "policy's weights and tokenizer are restored from the checkpoint"),
        ("sft.steps=10", "warm-up ran before the first checkpoint"),
        ("task.train_size=300", "task sampler's cursor"),
        ("task.params.digits=2", "task sampler's cursor"),
        ("trainer.seed=1", "continue the original seed's streams"),
        ("algo.kl_coef=0.1", "holds no reference model"),
        ("critic.enabled=true", "holds no value model"),
    ],
)
def test_changes_the_checkpoint_would_undo_are_refused_even_with_force(tmp_path: Path, override: str, reason: str) -> None:
    run = make_run(tmp_path / "run", written_at=tmp_path / "run")
    key = override.split("=")[0]
    for force in (False, True):  # without --force, the message does not send the user to --force first
        with pytest.raises(ConfigError) as caught:
            resume_config(str(run), [override], force=force)
        message = str(caught.value)
        assert "not even with --force" in message and key in message and reason in message
        assert f"--model {run / 'checkpoints' / 'step_000002' / 'model'}" in message


@pytest.mark.parametrize("override", ["critic.preset=micro", "critic.trunk=separate", "critic.num_bins=11", "critic.loss=hl_gauss"])
def test_the_shape_of_a_restored_critic_cannot_change(tmp_path: Path, override: str) -> None:
    run = make_run(tmp_path / "run", tmp_path / "run", "critic.enabled=true", "algo.advantage=gae", "critic.trunk=separate")
    if override == "critic.trunk=separate":
        override = "critic.trunk=policy_copy"
    with pytest.raises(ConfigError, match=f"{override.split('=')[0]}: .*the value model's weights are restored"):
        resume_config(str(run), [override], force=True)


ASYNC = ("trainer.schedule=async", "algo.tis_cap=2.0")


@pytest.mark.parametrize("override", ["trainer.schedule=sync", "trainer.max_staleness=2", "trainer.partial_rollouts=true"])
def test_an_async_run_keeps_its_schedule(tmp_path: Path, override: str) -> None:
    run = make_run(tmp_path / "run", tmp_path / "run", *ASYNC)
    with pytest.raises(ConfigError, match=f"{override.split('=')[0]}: .*sampled ahead under the original schedule"):
        resume_config(str(run), [override], force=True)


def test_a_sync_run_may_turn_async_and_an_async_one_is_told_what_was_sampled_ahead(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path / "sync", tmp_path / "sync")
    assert resume_config(str(run), [*ASYNC], force=True).trainer.schedule == "async"  # nothing was in flight
    assert "sampled ahead" not in capsys.readouterr().err
    run = make_run(tmp_path / "async", tmp_path / "async", *ASYNC)
    assert resume_config(str(run), ["rollout.temperature=0.7"], force=True).rollout.temperature == 0.7
    assert "keep the values they were sampled and scored with" in capsys.readouterr().err


def test_without_a_checkpoint_the_run_starts_over_and_every_change_applies(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", written_at=tmp_path / "run", checkpoint=False)
    cfg = resume_config(str(run), ["model.preset=nano", "trainer.seed=1", "sft.steps=10"], force=True)
    assert (cfg.model.preset, cfg.trainer.seed, cfg.sft.steps) == ("nano", 1, 10)
    with pytest.raises(ConfigError, match="pass --force"):
        resume_config(str(run), ["trainer.seed=1"])  # still not the original run: --force needed


def test_a_named_checkpoint_counts_as_one(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", written_at=tmp_path / "run", checkpoint=False)
    with pytest.raises(ConfigError, match="not even with --force"):
        resume_config(str(run), ["trainer.seed=1"], force=True, checkpoint=str(tmp_path / "other" / "step_000004"))


@pytest.mark.parametrize(
    "saved, override, read",
    [
        ((), "algo.lr=0.05", lambda c: c.algo.lr == 0.05),  # re-applied over the restored optimizer state
        ((), "critic.lr=0.05", lambda c: c.critic.lr == 0.05),
        (("algo.kl_coef=0.1",), "algo.kl_coef=0.2", lambda c: c.algo.kl_coef == 0.2),  # the reference exists
        (("algo.kl_coef=0.1",), "algo.kl_coef=0", lambda c: c.algo.kl_coef == 0),
        (("critic.enabled=true", "algo.advantage=gae"), "critic.enabled=false", lambda c: not c.critic.enabled),
        ((), "critic.preset=micro", lambda c: c.critic.preset == "micro"),  # no critic in this run: nothing restored
        ((), "rollout.temperature=0.7", lambda c: c.rollout.temperature == 0.7),
    ],
)
def test_forced_changes_that_can_take_effect_are_accepted(tmp_path: Path, saved: tuple, override: str, read, capsys) -> None:
    run = make_run(tmp_path / "run", tmp_path / "run", *saved)
    with pytest.raises(ConfigError, match="pass --force"):
        resume_config(str(run), [override])
    assert read(resume_config(str(run), [override], force=True))
    assert f"--force: resuming {run} with {override.split('=')[0]}" in capsys.readouterr().err


def test_cli_refusal_exits_2_with_the_reason(tmp_path: Path, capsys) -> None:
    run = make_run(tmp_path / "run", written_at=tmp_path / "run")
    assert main(["train", "--resume", str(run), "--force", "model.preset=nano"]) == 2
    err = capsys.readouterr().err
    assert "model.preset" in err and "restored from the checkpoint" in err


def test_a_resumed_run_may_move_to_another_device_with_force(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", written_at=tmp_path / "run")
    with pytest.raises(ConfigError, match="model.device"):  # other kernels, other bits: not silently
        resume_config(str(run), ["model.device=cuda"])
    assert resume_config(str(run), ["model.device=cuda"], force=True).model.device == "cuda"


def test_a_lora_run_refusing_a_change_points_at_a_merged_model(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", tmp_path / "run", "model.lora.r=4")
    with pytest.raises(ConfigError, match="holds the adapter only"):
        resume_config(str(run), ["model.lora.r=8"], force=True)
