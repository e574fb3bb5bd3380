"""Addition with mixed digit counts: every count appears, each task says its count, held-out pairs never train."""

from __future__ import annotations

import pytest

from reinforge.config import ConfigError, TaskConfig
from reinforge.tasks import arithmetic


def test_mixed_digits_tag_each_task_and_keep_held_out_pairs_out_of_training():
    cfg = TaskConfig(params={"digits": [1, 3]}, train_size=300, eval_size=40)
    splits = arithmetic.load(cfg, seed=0)
    assert len(splits.train) == 300 and len(splits.eval) == 40
    for task in splits.train + splits.eval:
        digits = task.metadata["digits"]
        assert digits in (1, 3) and max(task.metadata["a"], task.metadata["b"]) < 10**digits
        assert task.answer == str(task.metadata["a"] + task.metadata["b"])
    assert {t.metadata["digits"] for t in splits.train} == {1, 3}
    held_out = {(t.metadata["a"], t.metadata["b"]) for t in splits.eval}
    assert not held_out & {(t.metadata["a"], t.metadata["b"]) for t in splits.train}
    assert all(t.demonstration == t.answer for t in splits.eval)


@pytest.mark.parametrize(
    ("params", "eval_size", "message"),
    [
        ({"digits": [1, 1]}, 10, "distinct integers in 1..9"),
        ({"digits": [0, 2]}, 10, "distinct integers in 1..9"),
        ({"digits": [1, 2], "op": "*"}, 10, r"is for op='\+'"),
        ({"digits": [1, 2]}, 101, "use task.eval_size <= 100"),
    ],
)
def test_bad_mixes_are_refused(params, eval_size, message):
    with pytest.raises(ConfigError, match=message):
        arithmetic.check(TaskConfig(params=params, eval_size=eval_size))
