"""A resumed run cuts its logs back to their length at the checkpoint, and never pads them."""

from __future__ import annotations

import json
from pathlib import Path

from reinforge.runtime.checkpoint import _end_of_last_line, truncate_logs

ROWS = b"".join(json.dumps({"step": s, "reward": s / 10}).encode() + b"\n" for s in range(1, 7))


def test_a_longer_log_is_cut_back_to_its_checkpoint_length(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_bytes(ROWS)
    at_checkpoint = ROWS.index(b'{"step": 4')  # rows 4-6 belong to steps after the checkpoint
    assert truncate_logs(tmp_path, {"metrics.jsonl": at_checkpoint}) == []
    assert (tmp_path / "metrics.jsonl").read_bytes() == ROWS[:at_checkpoint]


def test_a_shortened_log_is_not_padded_and_keeps_its_complete_lines(tmp_path: Path) -> None:
    log = tmp_path / "metrics.jsonl"
    cut = ROWS.index(b'{"step": 3') + 5  # shortened by hand, mid-row
    log.write_bytes(ROWS[:cut])
    warnings = truncate_logs(tmp_path, {"metrics.jsonl": len(ROWS)})
    content = log.read_bytes()
    assert b"\0" not in content
    assert content == ROWS[: ROWS.index(b'{"step": 3')]  # the partial row is dropped, rows 1-2 stay
    assert [json.loads(line)["step"] for line in content.splitlines()] == [1, 2]
    assert len(warnings) == 1
    assert str(log) in warnings[0] and f"is {cut} bytes" in warnings[0] and f"{len(ROWS)} bytes" in warnings[0]


def test_a_missing_log_is_reported_and_not_created(tmp_path: Path) -> None:
    warnings = truncate_logs(tmp_path, {"samples.jsonl": 120, "eval_samples.jsonl": 0})
    assert not (tmp_path / "samples.jsonl").exists() and not (tmp_path / "eval_samples.jsonl").exists()
    assert len(warnings) == 1 and "samples.jsonl is missing" in warnings[0]


def test_end_of_last_line_across_read_blocks(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"ab\n" + b"x" * 50)
    with path.open("rb") as f:
        assert _end_of_last_line(f, 53, block=4) == 3  # the newline is 13 blocks back
        assert _end_of_last_line(f, 2, block=4) == 0  # no complete line at all
        assert _end_of_last_line(f, 3, block=1) == 3
