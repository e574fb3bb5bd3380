"""The TensorBoard sink when its event file cannot be written mid-run: one warning line on stderr,
no traceback (not even the writer thread's), the sink stops, and the run's metrics.jsonl goes on."""

from __future__ import annotations

import os

from reinforge.telemetry import MetricsLogger, read_jsonl_metrics


def break_event_file(log_dir) -> str:
    """Replace the event file by a directory: every later append to it fails with an OSError, as
    on a run directory made read-only (which root, running this suite, would write anyway)."""
    (name,) = os.listdir(log_dir)
    os.remove(log_dir / name)
    os.mkdir(log_dir / name)
    return name


def test_an_unwritable_event_file_is_one_warning_and_the_run_goes_on(tmp_path, capsys) -> None:
    logger = MetricsLogger(tmp_path, tensorboard=True)
    logger.log(0, {"reward": 0.5})
    name = break_event_file(tmp_path / "tensorboard")
    logger.log(1, {"reward": 0.6})
    logger.log(2, {"reward": 0.7})
    logger.close()
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception in thread" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("reinforge: WARNING: TensorBoard curves stop here: cannot write ")
    assert name in lines[0] and "telemetry.tensorboard=false" in lines[0]
    (tensorboard,) = [s for s in logger.sinks if type(s).__name__ == "TensorBoardSink"]
    assert isinstance(tensorboard.disabled_by, OSError)
    assert [r["reward"] for r in read_jsonl_metrics(tmp_path / "metrics.jsonl")] == [0.5, 0.6, 0.7]


def test_a_tensorboard_directory_that_cannot_be_made_is_one_warning(tmp_path, capsys) -> None:
    (tmp_path / "tensorboard").write_text("a file where the directory should be\n")
    with MetricsLogger(tmp_path, tensorboard=True) as logger:
        logger.log(0, {"reward": 0.5})
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "TensorBoard curves stop here" in err and str(tmp_path / "tensorboard") in err
